package merge

// walker.go owns the capture → archive walk (M3, M4, M8).

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/internal/crashpoint"
)

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
	defer it.Close()

	acks := archive.NewAcks()
	inflight := 0
	var receipts []archive.Receipt
	// settle waits until at most max units are in flight.
	settle := func(max int) error {
		for inflight > max {
			select {
			case <-acks.Ready():
			case <-cfg.Writer.Done():
				if receipts = acks.Drain(receipts[:0]); len(receipts) == 0 {
					return fmt.Errorf("merge: archive writer stopped: %w", writerErr(cfg.Writer))
				}
			case <-ctx.Done():
				return ctx.Err()
			}
			receipts = acks.Drain(receipts[:0])
			for _, r := range receipts {
				inflight--
				if r.Refused != nil {
					return fmt.Errorf("merge: the writer refused a merge unit (a bug): %w", r.Refused)
				}
				st.Units++
				st.Kept += r.Kept
				st.Stale += r.Stale
				st.Through = r.Token.(uint64)
				cfg.Metrics.merged(r.Kept, r.Stale, st.Through)
				cfg.Crash.Hit(crashpoint.MergeBatch)
			}
		}
		return nil
	}

	var (
		unit    []archive.Event
		repos   []archive.RepoUpdate
		lastCap uint64
		lastUp  int64 = -1
	)
	flush := func() error {
		if len(unit) == 0 {
			return nil
		}
		cur, err := archive.EncodeSeqCursor(lastCap)
		if err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		u := &archive.Unit{Events: unit, Repos: repos, Puts: []archive.KV{{Key: archive.KeyCursorMerge, Value: cur}}, Token: lastCap, Acks: acks}
		if err := cfg.Writer.Submit(ctx, u); err != nil {
			return fmt.Errorf("merge: submit: %w", err)
		}
		inflight++
		unit, repos = nil, nil
		return settle(cfg.InFlight - 1)
	}
	now := cfg.Now().UnixMicro()
	for it.Next() {
		ev := it.Event()
		// Cut units only between upstream events (see doc.go).
		if len(unit) >= cfg.MaxRows && (ev.UpstreamSeq != lastUp || ev.UpstreamSeq == 0) {
			if err := flush(); err != nil {
				return st, err
			}
		}
		row := ev.Clone()
		lastCap, lastUp = row.Seq, row.UpstreamSeq
		row.Seq, row.TimeUS, row.Source = 0, 0, archive.SourceMerge
		unit = append(unit, row)
		if up := firehose.Effects(&row, now); up != nil {
			repos = append(repos, *up)
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

func writerErr(w *archive.Writer) error {
	if err := w.Err(); err != nil {
		return err
	}
	return archive.ErrClosed
}
