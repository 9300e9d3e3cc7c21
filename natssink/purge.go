package natssink

// This file owns the detection of a stream emptied behind a running
// session. A purge keeps the stream's last sequence and last message id,
// so the session's next publishes are accepted behind it; only the
// stream's state shows it: its first sequence moves past messages the
// session had stored. The operator removing the stream's only message
// (nats stream rmm) leaves the very same state (the first sequence one
// past the last, no message, nothing counted as deleted; every field of
// the stream info but the last message's time, and the servers keep the
// removed id as the last message id either way); what tells them apart
// is how many messages went at once: a single one is a removal, and the
// sink publishes on behind it. A purge of a stream holding one message
// is thus taken for a removal. A partial purge (keep, or up to a
// sequence), or removals at the front, that leave a message the stream
// held at the watch's previous look are no purge (a purge since would
// have taken it); those that leave none are taken for one: nothing the
// servers show tells them apart from a purge followed by the session's
// publishes (TestTrimLooksLikePurgeThenPublishes).

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// purgedError ends a session whose stream was emptied behind it.
type purgedError struct{ firstSeq, stored uint64 }

func (e *purgedError) Error() string {
	return fmt.Sprintf("the stream was emptied (purged) while the sink published into it, or trimmed keeping none of the messages it held a second before: its first sequence is %d, past %d, which the sink had stored",
		e.firstSeq, e.stored)
}

// watchPurge samples the stream at the session's first acknowledgement
// (first) and then every PositionEvery until stop is called, and sends on
// purged once the stream's first sequence is past a message known to be
// stored at the sample before (or at resume, base), and more than one
// message went since the sample before (or resume, resumed), and none the
// stream held then is left: every message up to it is gone at once. One message gone is the operator
// removing it (the sink's Sink.removed). On a stream whose limits remove
// messages (max_age, or discard old, or a retention other than limits)
// that is what they do too: it watches nothing there, nor once the stream
// is given such a limit.
func (p *publisher) watchPurge(ctx context.Context, stream jetstream.Stream, resumed jetstream.StreamState, base uint64, first <-chan struct{}) (purged <-chan *purgedError, stop func()) {
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
		judge := purgeJudge{seen: base, prev: resumed}
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
			p.showConfig(info.Config)
			if remove, _ := limits(info.Config); len(remove) > 0 {
				return // a limit given to the stream since the session began
			}
			switch e, removed := judge.sample(info.State, stored); {
			case e != nil:
				found <- e
				return
			case removed:
				// The stored sequence, then the archive seq acknowledged
				// with it or later (ack writes them in the other order):
				// a later one means the stream went on past it.
				last := p.storedSeq.Load()
				p.sink.removed(ctx, info, last, p.sink.acked.Load())
			}
		}
	}()
	return found, func() { cancel(); <-done }
}

// purgeJudge tells, sample by sample of the stream's state, a purge from
// the removal of a single message.
type purgeJudge struct {
	seen uint64 // a stream sequence known to be stored before the last sample (0: none yet)
	// prev is the stream's state at the last sample that compared (seen >
	// 0), or at resume. A sample before anything is known stored does not
	// compare, and is not the reference either: the messages stored since
	// resume may already be gone by then.
	prev jetstream.StreamState
}

// sample judges cur, stored being the session's last acknowledged stream
// sequence as read before cur was: a purge, once every message up to seen
// is gone, more than one message went since prev, and none the stream
// held at prev is left; a single message removed from the front
// (removed), once per first sequence; or neither.
func (j *purgeJudge) sample(cur jetstream.StreamState, stored uint64) (purged *purgedError, removed bool) {
	if j.seen > 0 {
		// Not again for the same first sequence: nothing went from the
		// front since a removal was let pass.
		if cur.FirstSeq > j.seen && cur.FirstSeq != j.prev.FirstSeq {
			switch {
			case gone(j.prev, cur) <= 1:
				removed = true
			case cur.FirstSeq > j.prev.LastSeq:
				return &purgedError{firstSeq: cur.FirstSeq, stored: j.seen}, false
			}
			// Else the stream still holds a message it held at prev
			// (stored there, its acknowledgement not read yet): a purge
			// since would have taken it. A trim of the front, not a purge.
		}
		j.prev = cur
	}
	j.seen = max(j.seen, stored)
	return nil, removed
}

// gone is how many messages went from the stream between two samples of
// its state: those it held at prev and those stored since, less those it
// holds at cur. A last sequence gone back (the stream deleted and created
// again) counts as every message gone.
func gone(prev, cur jetstream.StreamState) uint64 {
	if cur.LastSeq < prev.LastSeq {
		return max(prev.Msgs, 2)
	}
	had := prev.Msgs + (cur.LastSeq - prev.LastSeq)
	return had - min(had, cur.Msgs)
}
