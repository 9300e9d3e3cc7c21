package merge

// walker.go owns the capture → archive walk (M3, M4, M8).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/internal/crashpoint"
)

// iterMaxAge is how long the walk reads cap/ through one iterator before
// it opens a new one where it stands.
const iterMaxAge = 10 * time.Second

// Stats summarise one walk.
type Stats struct {
	Units, Kept, Stale int
	Through            uint64 // cursor/merge at the end
}

// Walk merges every captured row after cursor/merge and returns once the
// last unit is durable. The capture writer must be stopped: Walk reads cap/
// to its end as of the call.
func Walk(ctx context.Context, cfg Config) (Stats, error) {
	cfg.defaults()
	var st Stats
	from, err := cfg.Store.MergeCursor()
	if errors.Is(err, archive.ErrNotFound) {
		from, err = 0, nil
	}
	if err != nil {
		return st, fmt.Errorf("merge: read cursor: %w", err)
	}
	st.Through = from
	it, err := cfg.Store.Captured(from + 1)
	if err != nil {
		return st, fmt.Errorf("merge: %w", err)
	}
	defer func() { it.Close() }()
	opened := cfg.Now()

	acks := archive.NewAcks()
	inflight := 0
	// settle waits until at most max units are in flight. Every receipt
	// that arrived counts, also when the wait ends with the writer's stop.
	settle := func(max int) error {
		if inflight <= max {
			return nil
		}
		rc, err := acks.Wait(ctx, cfg.Writer, inflight-max)
		for _, r := range rc {
			inflight--
			if r.Refused != nil {
				return fmt.Errorf("merge: the writer refused a merge unit (a bug): %w", r.Refused)
			}
			st.Units++
			st.Kept += r.Kept
			st.Stale += r.Stale
			if r.Cursor > st.Through { // the durable cursor/merge: units may be applied out of order around a replacement
				st.Through = r.Cursor
			}
			cfg.Metrics.merged(r, st.Through)
			cfg.Crash.Hit(crashpoint.MergeBatch)
		}
		if err != nil {
			return fmt.Errorf("merge: wait for the archive writer: %w", err)
		}
		return nil
	}

	var (
		unit    []archive.Event
		held    int64 // the unit's rows, as held in memory
		repos   []archive.RepoUpdate
		lastCap uint64
		lastUp  int64 = -1
	)
	flush := func() error {
		if len(unit) == 0 {
			return nil
		}
		u := &archive.Unit{Events: unit, Repos: repos, Cursor: archive.SeqCursor{Key: archive.KeyCursorMerge, Seq: lastCap}, Token: lastCap, Acks: acks}
		if err := cfg.Writer.Submit(ctx, u); err != nil {
			return fmt.Errorf("merge: submit: %w", err)
		}
		inflight++
		unit, held, repos = nil, 0, nil
		return settle(cfg.InFlight - 1)
	}
	now := opened.UnixMicro()
	for it.Next() {
		ev := it.Event()
		// Cut units only between upstream events (see doc.go).
		full := len(unit) >= cfg.MaxRows || held >= cfg.MaxBytes
		cut := full && (ev.UpstreamSeq != lastUp || ev.UpstreamSeq == 0)
		if cut {
			if err := flush(); err != nil {
				return st, err
			}
		}
		row := ev.Clone()
		lastCap, lastUp = row.Seq, row.UpstreamSeq
		row.Seq, row.TimeUS, row.Source = 0, 0, archive.SourceMerge
		unit = append(unit, row)
		held += archive.EventBytes(&row)
		if up := firehose.Effects(&row, now); up != nil {
			repos = append(repos, *up)
		}
		// An iterator pins every table it can see: one held for a whole
		// walk (the capture of a long bootstrap, archived meanwhile) would
		// keep every table compacted away since it opened on disk.
		if cut {
			if t := cfg.Now(); t.Sub(opened) >= iterMaxAge {
				it.Close()
				if it, err = cfg.Store.Captured(lastCap + 1); err != nil {
					return st, fmt.Errorf("merge: %w", err)
				}
				opened = t
			}
		}
	}
	if err := it.Err(); err != nil {
		return st, fmt.Errorf("merge: read capture: %w", err)
	}
	if err := flush(); err != nil {
		return st, err
	}
	if err := settle(0); err != nil {
		return st, err
	}
	return st, nil
}
