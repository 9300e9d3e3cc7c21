package main

// main.go owns the flags, the order of the parts, the report and its JSON.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the benchmark's settings (flags).
type options struct {
	bin            string
	devnetBin      string // "" = bin
	shapes         []shape
	runs           int
	out            string
	workers        int
	rate           float64
	timeout        time.Duration
	parts          map[string]bool
	preload        int
	ingestAccounts int
	fanoutAccounts int
	liveRate       float64
	subscribers    int
	window         time.Duration
	idleWindow     time.Duration
	pprofDir       string              // CPU profiles of serve in the first run of ingest and fanout; "" = none
	serveArgs      []string            // appended to every serve's arguments (e.g. --verify off)
	sideArgs       map[string][]string // A/B mode: appended to the serves of side "A" or "B" only
	warmups        int                 // A/B mode: discarded runs of the first shape by each side before the pairs
}

// profilePath is where run's profile of part goes ("" when not profiling).
func (o options) profilePath(part string, run int) string {
	if o.pprofDir == "" || run != 1 {
		return ""
	}
	return filepath.Join(o.pprofDir, part+".pprof")
}

type report struct {
	Date     string            `json:"date"`
	Commit   string            `json:"commit,omitempty"`
	Host     map[string]string `json:"host"`
	Settings map[string]any    `json:"settings"`
	Runs     []bootRun         `json:"runs"`    // bootstrap runs
	Medians  []bootRun         `json:"medians"` // bootstrap medians per shape
	Ingest   []ingestRun       `json:"ingest_runs,omitempty"`
	IngestM  *ingestRun        `json:"ingest_median,omitempty"`
	Fanout   []fanoutRun       `json:"fanout_runs,omitempty"`
	FanoutM  *fanoutRun        `json:"fanout_median,omitempty"`
	Table    []row             `json:"table"`
	Elapsed  float64           `json:"elapsed_seconds"`
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/backstream", "the backstream binary")
	flag.StringVar(&o.devnetBin, "devnet-bin", "", "the binary that runs the devnet (empty: -bin); e.g. this tree's, to measure an older serve")
	shapesFlag := flag.String("shapes", "2000x200,20000x50", "bootstrap shapes: comma-separated accounts x mean records per account")
	flag.IntVar(&o.runs, "runs", 3, "runs of each part (medians are reported)")
	flag.StringVar(&o.out, "out", "bench/results", "directory of the JSON results (empty: none)")
	flag.IntVar(&o.workers, "workers", 100, "serve --backfill-workers in the bootstrap part")
	enumFlag := flag.String("enumerate", "relay,hosts", "bootstrap: serve --enumerate modes measured, each on every shape")
	flag.Float64Var(&o.rate, "rate", 50, "devnet --rate during the bootstrap part")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up on one run after this long")
	partsFlag := flag.String("parts", "bootstrap,ingest,fanout", "parts to run")
	flag.IntVar(&o.preload, "preload", 200_000, "ingest: events of the network's history (devnet --preload-events)")
	flag.IntVar(&o.ingestAccounts, "ingest-accounts", 10_000, "ingest: accounts of the network")
	flag.IntVar(&o.fanoutAccounts, "fanout-accounts", 2000, "fanout: accounts of the network (10 records each)")
	flag.Float64Var(&o.liveRate, "live-rate", 1000, "fanout: network events per second")
	flag.IntVar(&o.subscribers, "subscribers", 100, "fanout: live subscribers")
	flag.DurationVar(&o.window, "window", 10*time.Second, "fanout: length of the idle and the measured windows")
	flag.DurationVar(&o.idleWindow, "idle-window", 3*time.Second, "ingest: window measuring serve's idle CPU before the replay")
	flag.StringVar(&o.pprofDir, "pprof", "", "write CPU profiles of serve (first run: live ingest, replay, fan-out window) to this directory")
	serveArgs := flag.String("serve-args", "", "arguments appended to every serve of every part, space-separated (e.g. \"--verify off\")")
	abRef := flag.String("ab-ref", "", "A/B mode: the reference serve binary; -bin is the candidate (and runs every devnet); -runs pairs per shape of bootstrap only (see ab.go)")
	aArgs := flag.String("a-serve-args", "", "A/B mode: arguments appended to the reference's serves only, space-separated")
	flag.IntVar(&o.warmups, "ab-warmups", 1, "A/B mode: bootstraps of the first shape by each side before the pairs, measured and discarded (the first run of a sitting is often slow)")
	bArgs := flag.String("b-serve-args", "", "A/B mode: arguments appended to the candidate's serves only, space-separated (e.g. \"--verify off\")")
	flag.Parse()
	o.serveArgs = strings.Fields(*serveArgs)
	o.sideArgs = map[string][]string{"A": strings.Fields(*aArgs), "B": strings.Fields(*bArgs)}
	if o.pprofDir != "" {
		if err := os.MkdirAll(o.pprofDir, 0o755); err != nil {
			fail(err)
		}
	}

	for _, s := range strings.Split(*shapesFlag, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		var sh shape
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%dx%d", &sh.Accounts, &sh.Records); err != nil {
			fail(fmt.Errorf("-shapes %q: want AxR, e.g. 2000x200", s))
		}
		o.shapes = append(o.shapes, sh)
	}
	o.parts = map[string]bool{}
	for _, p := range strings.Split(*partsFlag, ",") {
		switch p = strings.TrimSpace(p); p {
		case "bootstrap", "ingest", "fanout":
			o.parts[p] = true
		case "":
		default:
			fail(fmt.Errorf("-parts: unknown part %q (want bootstrap, ingest, fanout)", p))
		}
	}
	if o.warmups < 0 {
		fail(fmt.Errorf("-ab-warmups %d: want 0 or more", o.warmups))
	}
	if o.runs < 1 {
		fail(fmt.Errorf("-runs %d: want at least 1", o.runs))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *abRef != "" {
		if err := mainAB(ctx, o, *abRef); err != nil {
			fail(err)
		}
		return
	}

	began := time.Now()
	rep := report{
		Date:   time.Now().UTC().Format(time.RFC3339),
		Commit: gitCommit(),
		Host: map[string]string{
			"cpus": strconv.Itoa(runtime.NumCPU()), "goos": runtime.GOOS, "goarch": runtime.GOARCH,
			"kernel": strings.TrimSpace(readString("/proc/sys/kernel/osrelease")),
		},
		Settings: map[string]any{"workers": o.workers, "devnet_rate": o.rate, "runs": o.runs, "shapes": *shapesFlag, "serve_args": *serveArgs,
			"binary_cgo": binaryCgo(o.bin), "parts": *partsFlag, "preload_events": o.preload,
			"ingest_accounts": o.ingestAccounts, "fanout_accounts": o.fanoutAccounts, "live_rate": o.liveRate,
			"subscribers": o.subscribers, "window_seconds": o.window.Seconds()},
	}
	if o.parts["bootstrap"] {
		for _, sh := range o.shapes {
			for _, mode := range strings.Split(*enumFlag, ",") {
				var rs []bootRun
				for i := 1; i <= o.runs; i++ {
					logf("bootstrap %s (%s) run %d/%d ...", sh, mode, i, o.runs)
					r, err := measureBootstrap(ctx, o, sh, mode)
					if err != nil {
						fail(fmt.Errorf("bootstrap %s (%s) run %d: %w", sh, mode, i, err))
					}
					r.Run = i
					logf("bootstrap %s (%s) run %d: %.0f records/CPU-s, %.0f records/s, peak RSS %s, %.1f B/event",
						sh, mode, i, r.RecordsPerCPUSec, r.RecordsPerSec, mib(r.PeakRSSBytes), r.BytesPerEvent)
					rs = append(rs, r)
				}
				rep.Runs = append(rep.Runs, rs...)
				rep.Medians = append(rep.Medians, medianOf(rs))
			}
		}
	}
	if o.parts["ingest"] {
		rs, err := runIngest(ctx, o)
		if err != nil {
			fail(err)
		}
		rep.Ingest = rs
		m := medianOf(rs)
		rep.IngestM = &m
	}
	if o.parts["fanout"] {
		rs, err := runFanout(ctx, o)
		if err != nil {
			fail(err)
		}
		rep.Fanout = rs
		m := medianOf(rs)
		rep.FanoutM = &m
	}
	rep.Elapsed = time.Since(began).Seconds()
	rep.Table = buildTable(rep, o)
	printTable(os.Stdout, rep)
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			fail(err)
		}
		path := filepath.Join(o.out, time.Now().UTC().Format("2006-01-02T150405Z")+".json")
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("\nwritten to %s\n", path)
	}
}

// runIngest starts the ingest network once (its history is fixed: no live
// traffic) and measures o.runs fresh serves against it.
func runIngest(ctx context.Context, o options) ([]ingestRun, error) {
	dir, err := os.MkdirTemp("", "backstream-bench-net-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	logf("ingest: building a network with a %d-event history ...", o.preload)
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, o.timeout)
	devnet, relay, err := startDevnet(sctx, o.devnet(), dir, "devnet", ingestNetwork(o))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	defer devnet.kill()
	// The history is fixed once the generator's single live event is out.
	var head int64
	for done := false; !done; {
		var err error
		if head, done, err = devnetStatus(&http.Client{Timeout: 5 * time.Second}, relay); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
		if !done {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	logf("ingest: network ready in %v, head seq %d", time.Since(t0).Round(time.Second), head)
	var rs []ingestRun
	for i := 1; i <= o.runs; i++ {
		logf("ingest run %d/%d ...", i, o.runs)
		r, err := measureIngest(ctx, o, devnet, relay, head, i)
		if err != nil {
			return nil, fmt.Errorf("ingest run %d: %w", i, err)
		}
		r.Run = i
		logf("ingest run %d: %.0f events/s, %.1f CPU-s per million events, %.4f DID resolutions per event (rows archived %d, stale %d); replay %.0f events/s, %.2f CPU-µs/event",
			i, r.EventsPerSec, r.CPUSecsPerMillion, r.ResolutionsPerEvent, r.RowsArchived, r.RowsStale, r.ReplayEventsPerSec, r.ReplayNetCPUMicros)
		rs = append(rs, r)
	}
	return rs, devnet.stop(10 * time.Second)
}

// runFanout starts the fan-out network once (live traffic at o.liveRate)
// and measures o.runs fresh serves against it.
func runFanout(ctx context.Context, o options) ([]fanoutRun, error) {
	dir, err := os.MkdirTemp("", "backstream-bench-net-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sctx, cancel := context.WithTimeout(ctx, o.timeout)
	devnet, relay, err := startDevnet(sctx, o.devnet(), dir, "devnet", fanoutNetwork(o))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("fanout: %w", err)
	}
	defer devnet.kill()
	var rs []fanoutRun
	for i := 1; i <= o.runs; i++ {
		logf("fanout run %d/%d ...", i, o.runs)
		r, err := measureFanout(ctx, o, relay, i)
		if err != nil {
			return nil, fmt.Errorf("fanout run %d: %w", i, err)
		}
		r.Run = i
		logf("fanout run %d: %.0f delivered/s, %.2f CPU-µs/delivered (net of idle %.3f CPU-s/s), delivery p50 %.2f ms p99 %.2f ms",
			i, r.DeliveredPerSec, r.NetCPUMicros, r.IdleCPUPerSec, r.DeliveryP50Millis, r.DeliveryP99Millis)
		rs = append(rs, r)
	}
	return rs, devnet.stop(10 * time.Second)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// binaryCgo is the CGO_ENABLED setting the binary was built with ("0" or
// "1"; "" when unknown). It matters: with cgo Pebble's zstd is the C
// library, without it the pure-Go one, which peaks at more memory.
// devnet is the binary that runs the devnet.
func (o options) devnet() string {
	if o.devnetBin != "" {
		return o.devnetBin
	}
	return o.bin
}

func binaryCgo(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "CGO_ENABLED=") {
			return strings.TrimPrefix(f[1], "CGO_ENABLED=")
		}
	}
	return ""
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
