package main

// metrics.go owns reading serve's /metrics: samples by series, sums over a
// metric's labels, and quantiles of a histogram between two scrapes.

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// samples maps a series as exposed ("name" or `name{label="v",...}`) to its
// value.
type samples map[string]float64

// scrape reads every sample of the Prometheus text format at url. It asks
// for the page uncompressed: the ingest part scrapes every 50 ms, and
// gzipping the page each time showed as ~4.5% of serve's CPU in a profile
// of strict ingest, a cost a Prometheus scraping every 15 s never pays.
func scrape(c *http.Client, url string) (samples, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseSamples(resp.Body)
}

// parseSamples parses the Prometheus text format (comments skipped, no
// timestamps expected).
func parseSamples(r io.Reader) (samples, error) {
	out := samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics: malformed line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		out[strings.TrimSpace(line[:i])] = v
	}
	return out, sc.Err()
}

// sum is the sum of every series of metric name (all label values), and
// whether there was one.
func (s samples) sum(name string) (float64, bool) {
	var t float64
	found := false
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			t += v
			found = true
		}
	}
	return t, found
}

// get is one series' value (0 when absent).
func (s samples) get(series string) float64 { return s[series] }

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64 // upper bound; +Inf for the last
	count float64 // cumulative
}

// buckets are the cumulative buckets of an unlabelled histogram, ascending.
func (s samples) buckets(name string) []bucket {
	var out []bucket
	prefix := name + `_bucket{le="`
	for k, v := range s {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64)
		if err != nil {
			continue
		}
		out = append(out, bucket{le: le, count: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out
}

// histDelta is the histogram of name observed between scrapes a and b.
func histDelta(a, b samples, name string) []bucket {
	before := map[float64]float64{}
	for _, x := range a.buckets(name) {
		before[x.le] = x.count
	}
	out := b.buckets(name)
	for i := range out {
		out[i].count -= before[out[i].le]
	}
	return out
}

// quantile estimates the q-quantile of cumulative buckets the way
// Prometheus's histogram_quantile does: linear within the bucket holding
// the rank, the lower bound of the first bucket being 0; a rank in the +Inf
// bucket gives the highest finite bound. NaN when there are no
// observations.
func quantile(q float64, bs []bucket) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				if i == 0 {
					return math.NaN()
				}
				return bs[i-1].le
			}
			inBucket := b.count - below
			if inBucket <= 0 {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/inBucket
		}
		lower, below = b.le, b.count
	}
	return bs[len(bs)-1].le
}
