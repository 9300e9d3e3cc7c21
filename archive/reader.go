package archive

// This file owns reading logs back: the tip of a log, iteration from a seq,
// and finding the first event at or after a time.

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// tip returns the highest seq in the log with the given prefix and its
// TimeUS (0, 0 for an empty log).
func (s *Store) tip(prefix []byte) (uint64, int64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, 0, fmt.Errorf("archive: read %s tip: %w", prefix, err)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, 0, &KeyError{Key: string(prefix) + "<tip>", Kind: ErrRead, Err: err}
		}
		return 0, 0, nil
	}
	seq, err := ParseSeqKey(prefix, it.Key())
	if err != nil {
		return 0, 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
	}
	var ev Event
	if err := DecodeEvent(it.Value(), seq, &ev); err != nil {
		return 0, 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
	}
	return seq, ev.TimeUS, nil
}

// Tip returns the highest archived seq (0 for an empty archive).
func (s *Store) Tip() (uint64, error) {
	seq, _, err := s.tip(PrefixEvent)
	return seq, err
}

// CaptureTip returns the highest captured seq (0 when nothing is captured).
func (s *Store) CaptureTip() (uint64, error) {
	seq, _, err := s.tip(PrefixCapture)
	return seq, err
}

// EventIter walks a log in seq order. Not safe for concurrent use.
type EventIter struct {
	it     *pebble.Iterator
	prefix []byte
	ev     Event
	err    error
	first  bool
}

// Events iterates ev/ from seq from (inclusive) to the end as of the call.
func (s *Store) Events(from uint64) (*EventIter, error) { return s.iter(PrefixEvent, from) }

// Captured iterates cap/ from seq from (inclusive).
func (s *Store) Captured(from uint64) (*EventIter, error) { return s.iter(PrefixCapture, from) }

func (s *Store) iter(prefix []byte, from uint64) (*EventIter, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: seqKey(prefix, from), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("archive: iterate %s: %w", prefix, err)
	}
	return &EventIter{it: it, prefix: prefix, first: true}, nil
}

// Next advances to the next event; false at the end or on error (see Err).
func (e *EventIter) Next() bool {
	if e.err != nil {
		return false
	}
	var ok bool
	if e.first {
		ok, e.first = e.it.First(), false
	} else {
		ok = e.it.Next()
	}
	if !ok {
		if err := e.it.Error(); err != nil {
			e.err = &KeyError{Key: string(e.prefix) + "<iter>", Kind: ErrRead, Err: err}
		}
		return false
	}
	seq, err := ParseSeqKey(e.prefix, e.it.Key())
	if err != nil {
		e.err = &KeyError{Key: keyString(e.it.Key()), Kind: ErrMalformed, Err: err}
		return false
	}
	if err := DecodeEvent(e.it.Value(), seq, &e.ev); err != nil {
		e.err = &KeyError{Key: keyString(e.it.Key()), Kind: ErrMalformed, Err: err}
		return false
	}
	return true
}

// Event is the current event. Its CID and Record alias iterator memory and
// are valid only until the next call to Next; use Clone to keep it.
func (e *EventIter) Event() *Event { return &e.ev }

// Err reports the error that stopped iteration.
func (e *EventIter) Err() error { return e.err }

// Close releases the iterator.
func (e *EventIter) Close() error {
	err := e.it.Close()
	if e.err != nil {
		return e.err
	}
	return err
}

// Clone returns a copy of ev that owns its byte slices.
func (ev *Event) Clone() Event {
	c := *ev
	c.CID = append([]byte(nil), ev.CID...)
	c.Record = append([]byte(nil), ev.Record...)
	return c
}

// SeqAtTime returns the first archived seq whose TimeUS is ≥ us, or tip+1
// when every archived event is older (the caller starts live). TimeUS
// strictly increases along seqs, so this is a binary search over point reads
// and a time taken from an event finds that very event.
func (s *Store) SeqAtTime(us int64) (uint64, error) {
	tip, tipUS, err := s.tip(PrefixEvent)
	if err != nil {
		return 0, err
	}
	if tip == 0 || tipUS < us {
		return tip + 1, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixEvent, UpperBound: prefixEnd(PrefixEvent)})
	if err != nil {
		return 0, fmt.Errorf("archive: seek time: %w", err)
	}
	defer it.Close()
	var ev Event
	// at reports the seq and time of the first event with seq ≥ q.
	at := func(q uint64) (uint64, int64, error) {
		if !it.SeekGE(EventKey(q)) {
			if err := it.Error(); err != nil {
				return 0, 0, &KeyError{Key: keyString(EventKey(q)), Kind: ErrRead, Err: err}
			}
			return 0, 0, errors.New("archive: seek time: log ended below its tip")
		}
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil {
			return 0, 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		if err := DecodeEvent(it.Value(), seq, &ev); err != nil {
			return 0, 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		return seq, ev.TimeUS, nil
	}
	lo, hi := uint64(0), tip // invariant: answer in (lo, hi]; the event at hi has time ≥ us
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		seq, t, err := at(mid)
		if err != nil {
			return 0, err
		}
		if t >= us {
			hi = seq
		} else {
			lo = seq
			if seq >= hi {
				break
			}
		}
	}
	seq, _, err := at(lo + 1)
	if err != nil {
		return 0, err
	}
	return seq, nil
}
