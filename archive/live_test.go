package archive

import (
	"sync"
	"testing"
)

// liveWith builds a log holding seqs first..last, one publish per batch of
// size batch, bounded by max bytes.
func liveWith(max int64, first, last uint64, batch int) *LiveLog {
	l := newLiveLog(max, first-1)
	var evs []*Event
	for seq := first; seq <= last; seq++ {
		ev := realisticEvent(int(seq))
		ev.Seq = seq
		evs = append(evs, &ev)
		if len(evs) == batch || seq == last {
			l.publish(evs)
			evs = nil
		}
	}
	return l
}

// TestLiveReadContract: Read and ReadEntries agree on events and floor at
// every start position, below, inside and beyond the held window, and honour
// max.
func TestLiveReadContract(t *testing.T) {
	empty := newLiveLog(1<<20, 41)
	if evs, floor := empty.Read(0, nil, 10); len(evs) != 0 || floor != 42 {
		t.Fatalf("empty log: %d events, floor %d; want 0, 42", len(evs), floor)
	}
	if ents, floor := empty.ReadEntries(50, nil, 10); len(ents) != 0 || floor != 42 {
		t.Fatalf("empty log entries: %d, floor %d", len(ents), floor)
	}
	l := liveWith(1<<30, 10, 60, 7)
	for from := uint64(0); from <= 65; from++ {
		for _, max := range []int{0, 1, 5, 100} {
			evs, f1 := l.Read(from, nil, max)
			ents, f2 := l.ReadEntries(from, nil, max)
			if f1 != 10 || f2 != 10 {
				t.Fatalf("from %d: floors %d %d, want 10", from, f1, f2)
			}
			start := max64(from, 10)
			want := 0
			if start <= 60 {
				want = min(int(60-start+1), max)
			}
			if len(evs) != want || len(ents) != want {
				t.Fatalf("from %d max %d: %d events, %d entries; want %d", from, max, len(evs), len(ents), want)
			}
			for i := range evs {
				if evs[i].Seq != start+uint64(i) || ents[i].Event != evs[i] {
					t.Fatalf("from %d: position %d holds seq %d / entry %p", from, i, evs[i].Seq, ents[i])
				}
			}
		}
	}
	if l.Tip() != 60 {
		t.Fatalf("tip %d", l.Tip())
	}
}

// TestLiveEntriesStableAcrossEviction: the entry a reader got keeps its
// event and memo when the log evicts and compacts around it, and a reader
// whose next seq fell below the floor is told so.
func TestLiveEntriesStableAcrossEviction(t *testing.T) {
	l := liveWith(16<<10, 1, 100, 10)
	ents, floor := l.ReadEntries(0, nil, 1000)
	if floor <= 1 {
		t.Fatalf("floor %d: the bound did not evict", floor)
	}
	held := ents[0]
	held.LoadOrStoreMemo("rendered")
	// Publish enough to evict everything held and force a compaction.
	for seq := uint64(101); seq <= 5000; seq += 50 {
		var evs []*Event
		for s := seq; s < seq+50; s++ {
			ev := realisticEvent(int(s))
			ev.Seq = s
			evs = append(evs, &ev)
		}
		l.publish(evs)
	}
	if got := held.Memo(); got != "rendered" || held.Event.Seq != floor {
		t.Fatalf("evicted entry changed: memo %v, seq %d", got, held.Event.Seq)
	}
	evs, f := l.Read(floor, nil, 10)
	if f <= floor || len(evs) == 0 || evs[0].Seq != f {
		t.Fatalf("after eviction: floor %d (was %d), first %v", f, floor, evs)
	}
	// A fresh read of a re-held seq gives an entry with an empty memo of its own.
	ents, _ = l.ReadEntries(f, nil, 1)
	if ents[0].Memo() != nil {
		t.Fatalf("new entry carries a memo: %v", ents[0].Memo())
	}
}

// TestLiveMemoOnce: concurrent LoadOrStoreMemo callers all get the one value
// that won, and later readers of the same seq see it.
func TestLiveMemoOnce(t *testing.T) {
	l := liveWith(1<<30, 1, 10, 10)
	ents, _ := l.ReadEntries(5, nil, 1)
	if ents[0].Memo() != nil {
		t.Fatal("memo set before anyone stored one")
	}
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := new(int)
			*v = i
			got[i] = l.evsAt(5).LoadOrStoreMemo(v)
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("caller %d got %v, caller 0 got %v", i, got[i], got[0])
		}
	}
	again, _ := l.ReadEntries(5, nil, 1)
	if again[0].Memo() != got[0] {
		t.Fatal("a later reader does not see the memo")
	}
	if other, _ := l.ReadEntries(6, nil, 1); other[0].Memo() != nil {
		t.Fatal("memo leaked to a neighbour")
	}
}

// TestLiveWaitWakesOnPublishAndClose: a channel taken before a publish is
// closed by it; after close, Wait returns closed channels and Closed is true.
func TestLiveWaitWakesOnPublishAndClose(t *testing.T) {
	l := newLiveLog(1<<20, 0)
	w := l.Wait()
	select {
	case <-w:
		t.Fatal("woken before a publish")
	default:
	}
	ev := realisticEvent(1)
	ev.Seq = 1
	l.publish([]*Event{&ev})
	<-w
	if l.Closed() {
		t.Fatal("closed before close")
	}
	l.close()
	<-l.Wait()
	if !l.Closed() {
		t.Fatal("not closed")
	}
}

func (l *LiveLog) evsAt(seq uint64) *LiveEntry {
	ents, _ := l.ReadEntries(seq, nil, 1)
	return ents[0]
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// TestLiveLogCountsCharges: what readers charge for an entry's memo counts
// in the bound: ten events with 100-byte memos fill a log of ten times
// their size, the oldest leaving as newer ones come (their charges with
// them); a charge for an entry no longer held counts nothing; a charge
// that passes the bound drops the oldest at once.
func TestLiveLogCountsCharges(t *testing.T) {
	ev := func(seq uint64) *Event {
		e := realisticEvent(int(seq))
		e.Seq = seq
		return &e
	}
	per := eventBytes(ev(1)) + 100
	l := newLiveLog(10*per, 0)
	var first *LiveEntry
	for seq := uint64(1); seq <= 30; seq++ {
		l.publish([]*Event{ev(seq)})
		ents, _ := l.ReadEntries(seq, nil, 1)
		ents[0].Charge(100)
		if seq == 1 {
			first = ents[0]
		}
	}
	held := func() (int, uint64) {
		ents, floor := l.ReadEntries(0, nil, 100)
		return len(ents), floor
	}
	if n, floor := held(); n != 10 || floor != 21 {
		t.Fatalf("with 100-byte memos: %d entries from %d, want 10 from 21", n, floor)
	}
	first.Charge(1 << 20)
	if n, floor := held(); n != 10 || floor != 21 {
		t.Fatalf("after charging an entry no longer held: %d entries from %d, want 10 from 21", n, floor)
	}
	ents, _ := l.ReadEntries(30, nil, 1)
	ents[0].Charge(int(per))
	if n, floor := held(); n != 9 || floor != 22 {
		t.Fatalf("after a charge past the bound: %d entries from %d, want 9 from 22", n, floor)
	}
}
