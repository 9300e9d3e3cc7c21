package natssink

// This file owns the detection of a stream emptied behind a running
// session. A purge keeps the stream's last sequence and last message id,
// so the session's next publishes are accepted behind it; only the
// stream's state shows it: its first sequence moves past messages the
// session had stored.

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// purgedError ends a session whose stream was emptied behind it.
type purgedError struct{ firstSeq, stored uint64 }

func (e *purgedError) Error() string {
	return fmt.Sprintf("the stream was emptied (purged) while the sink published into it: its first sequence is %d, past %d, which the sink had stored",
		e.firstSeq, e.stored)
}

// watchPurge samples the stream at the session's first acknowledgement
// (first) and then every PositionEvery until stop is called, and sends on
// purged once the stream's first sequence is past a message known to be
// stored at the sample before (or at resume, base): every message up to
// it is gone at once. On a stream whose limits remove messages (max_age,
// or discard old, or a retention other than limits) that is what they do
// too: it watches nothing there, nor once the stream is given such a
// limit.
func (p *publisher) watchPurge(ctx context.Context, stream jetstream.Stream, base uint64, first <-chan struct{}) (purged <-chan *purgedError, stop func()) {
	found := make(chan *purgedError, 1)
	if remove, _ := limits(stream.CachedInfo().Config); len(remove) > 0 {
		return found, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.sink.cfg.PositionEvery)
		defer t.Stop()
		seen := base // a stream sequence known to be stored before the last sample
		for {
			select {
			case <-ctx.Done():
				return
			case <-first:
				first = nil
			case <-t.C:
			}
			stored := p.storedSeq.Load()
			cctx, cancelInfo := context.WithTimeout(ctx, p.sink.cfg.AckTimeout)
			info, err := stream.Info(cctx)
			cancelInfo()
			if err != nil {
				continue // the session notices a lost server by itself
			}
			if remove, _ := limits(info.Config); len(remove) > 0 {
				return // a limit given to the stream since the session began
			}
			if seen > 0 && info.State.FirstSeq > seen {
				found <- &purgedError{firstSeq: info.State.FirstSeq, stored: seen}
				return
			}
			seen = max(seen, stored)
		}
	}()
	return found, func() { cancel(); <-done }
}
