package subscribe

// This file owns the replay planner: per subscriber and filter, whether a
// replay from the archive scans ev/ or reads the replay index (the rows of
// the wanted accounts, or of the wanted collections plus every marker row)
// and point-reads only those rows. Either way the rows it reads go through
// the same filter (admit): the index only narrows what is read, so both
// plans send exactly the same events.

import (
	"errors"
	"slices"
	"strings"

	"github.com/backstream/backstream/archive"
)

// Plans, the label values of the replay plan metrics.
const (
	planScan  = "scan"
	planIndex = "index"
)

const (
	// planRatio: a replay reads the index when its estimated rows are fewer
	// than 1/planRatio of the seqs it spans. An indexed row costs a seek
	// in the index and one in ev/, a scanned row a step and a decode; 16
	// leaves the index a wide margin over its per-row cost.
	planRatio = 16
	// planCountCap bounds the index keys a plan counts exactly; past it the
	// estimate is extrapolated from the ranges' bytes on disk.
	planCountCap = 1 << 20
	// planMaxRanges bounds the index ranges one replay merges (an account
	// or a collection each; a prefix filter is every collection under it):
	// more, and it scans.
	planMaxRanges = 20_000
	// planMaxPrefixRanges and planMaxPrefixBytes bound the collections a
	// filter's prefixes are listed as, in all, and their names' bytes:
	// more, and it scans. Those names are anyone's on the network (one
	// account can write records in 20,000 collections of 300-byte names
	// under app.bsky.), and an indexed replay holds each as a range of its
	// iterator (a head and the name's key prefix, about 100 bytes more
	// than the name), unreserved: the bounds keep that under about 90 KB,
	// less than the iterator's own Pebble iterators hold (about 110 KB,
	// TestPrefixPlanHeapBounded). A prefix over hundreds of collections
	// covers a large share of the rows anyway, which a scan reads best.
	planMaxPrefixRanges = 512
	planMaxPrefixBytes  = 32 << 10
)

// replayPlan is how a subscriber replays for one filter.
type replayPlan struct {
	f      *filter              // the filter it was made for
	ranges []archive.IndexRange // nil: scan, unless reexpand
	// reexpand: it reads the index, its ranges f's collections with a
	// prefix: each iterator opened lists the collections under it again,
	// so one first written after the plan is read too, and the plan keeps
	// none of them meanwhile.
	reexpand bool
	// unindexed: it scans because the index backfill had not ended; each
	// iterator opened plans again.
	unindexed bool
}

// rangesAt returns the ranges for an iterator opened now (nil: scan).
func (p *replayPlan) rangesAt(store *archive.Store) ([]archive.IndexRange, error) {
	if !p.reexpand {
		return p.ranges, nil
	}
	return collectionRanges(store, p.f)
}

func (p *replayPlan) name() string {
	if p.ranges != nil || p.reexpand {
		return planIndex
	}
	return planScan
}

// plan chooses how to replay the seqs [from, to) for f: the index when
// it is complete and the cheaper of the account ranges (wantedDids) and
// the collection ranges plus the markers (wantedCollections) is estimated
// below 1/planRatio of the span; else a scan. A filter that admits every
// row always scans, and so does every filter with scanOnly.
func plan(store *archive.Store, f *filter, from, to uint64, scanOnly bool) (*replayPlan, error) {
	p := &replayPlan{f: f}
	if scanOnly || f.dids == nil && f.allCollections() || to <= from {
		return p, nil
	}
	switch m, err := store.ReplayIndexMarker(); {
	case errors.Is(err, archive.ErrCompactionState):
		// A malformed marker halts compaction and the backfill (the
		// compaction owner reports it), not serving: the index's coverage
		// is unknown, so scan, and plan again at each iterator opened.
		p.unindexed = true
		return p, nil
	case err != nil:
		return nil, err
	case !m.Done():
		p.unindexed = true // a store older than the index: scan until the backfill ends
		return p, nil
	}
	// Keys are counted up to limit; past it the estimate extrapolates, and
	// it is compared with 1/planRatio of the span whatever its size.
	limit := int(min((to-from)/planRatio, planCountCap))
	best := uint64(to - from)
	for i, ranges := range [][]archive.IndexRange{didRanges(f), nil} {
		if i == 1 {
			var err error
			if ranges, err = collectionRanges(store, f); err != nil {
				return nil, err
			}
		}
		if ranges == nil {
			continue
		}
		est, _, err := store.EstimateIndex(ranges, from, to, limit+1)
		if err != nil {
			return nil, err
		}
		if est <= (to-from)/planRatio && est < best {
			p.ranges, best = ranges, est
			p.reexpand = i == 1 && f.prefixes != nil
		}
	}
	if p.reexpand {
		p.ranges = nil // listed again at each iterator opened
	}
	return p, nil
}

// didRanges is the account ranges of f's wantedDids (nil: none wanted).
func didRanges(f *filter) []archive.IndexRange {
	if f.dids == nil || len(f.dids) > planMaxRanges {
		return nil
	}
	r := make([]archive.IndexRange, 0, len(f.dids))
	for d := range f.dids {
		r = append(r, archive.IndexRange{Family: archive.PrefixByAccount, Name: d})
	}
	slices.SortFunc(r, func(a, b archive.IndexRange) int { return strings.Compare(a.Name, b.Name) })
	return r
}

// collectionRanges is the collection ranges of f's wantedCollections, a
// prefix's as every collection the index holds under it, plus the marker
// ranges f admits (nil: every collection wanted, or too many ranges, or
// its prefixes listed as more collections or names' bytes than
// planMaxPrefixRanges and planMaxPrefixBytes).
func collectionRanges(store *archive.Store, f *filter) ([]archive.IndexRange, error) {
	if f.allCollections() {
		return nil, nil
	}
	names := make(map[string]struct{}, len(f.exact))
	for c := range f.exact {
		names[c] = struct{}{}
	}
	listed, bytes := 0, 0
	for _, pre := range f.prefixes {
		under, ok, err := store.CollectionsUnder(pre, planMaxPrefixRanges-listed, planMaxPrefixBytes-bytes)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		for _, c := range under {
			names[c] = struct{}{}
			listed, bytes = listed+1, bytes+len(c)
		}
	}
	if len(names) > planMaxRanges {
		return nil, nil
	}
	r := make([]archive.IndexRange, 0, len(names)+1)
	for c := range names {
		r = append(r, archive.IndexRange{Family: archive.PrefixByCollection, Name: c})
	}
	slices.SortFunc(r, func(a, b archive.IndexRange) int { return strings.Compare(a.Name, b.Name) })
	return append(r, markerRanges(f)...), nil
}

// markerRanges is the marker rows every collection filter lets through:
// account and identity rows, and sync rows with includeSync.
func markerRanges(f *filter) []archive.IndexRange {
	kinds := []archive.Kind{archive.KindIdentity, archive.KindAccount}
	if f.withSync {
		kinds = append(kinds, archive.KindSync)
	}
	r := make([]archive.IndexRange, len(kinds))
	for i, k := range kinds {
		r[i] = archive.IndexRange{Family: archive.PrefixMarker, Name: archive.MarkerName(k)}
	}
	return r
}
