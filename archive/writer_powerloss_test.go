package archive

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// TestWriterPowerLoss simulates a power cut with Pebble's strict in-memory
// filesystem: everything not synced is lost. Every event a reader was handed
// before the cut must survive with identical content (D1); afterwards no seq
// is reused, TimeUS never goes backwards, and the replay index matches the
// surviving rows exactly (CheckReplayIndex).
func TestWriterPowerLoss(t *testing.T) {
	for _, cutAfter := range []int{1, 500, 5000} {
		t.Run(fmt.Sprint(cutAfter), func(t *testing.T) {
			powerLossRound(t, cutAfter)
		})
	}
}

func powerLossRound(t *testing.T, cutAfter int) {
	fs := vfs.NewStrictMem()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})

	// The reader follows the live log and records what it was handed.
	var mu sync.Mutex
	var handed []Event
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		next := uint64(1)
		for {
			wake := w.Live().Wait()
			evs, _ := w.Live().Read(next, nil, 1<<20)
			mu.Lock()
			for _, ev := range evs {
				handed = append(handed, ev.Clone())
				next = ev.Seq + 1
			}
			mu.Unlock()
			select {
			case <-wake:
				select {
				case <-w.Done():
					return
				default:
				}
			case <-w.Done():
				return
			}
		}
	}()

	// The producer submits small units as fast as the writer takes them.
	ctx, cancel := context.WithCancel(context.Background())
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ctx.Err() == nil; i++ {
			u := &Unit{Events: []Event{realisticEvent(i), realisticEvent(i + 1)}}
			if w.Submit(ctx, u) != nil {
				return
			}
		}
	}()

	// Cut the power once the reader holds cutAfter events.
	var before []Event
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		if len(handed) >= cutAfter {
			fs.SetIgnoreSyncs(true)
			before = append([]Event(nil), handed...)
			mu.Unlock()
			break
		}
		mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("reader never got enough events")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-prodDone
	w.Close()
	<-readerDone
	s.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)

	s = openMem(t, fs)
	defer s.Close()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[uint64]Event{}
	var maxSeq uint64
	for it.Next() {
		ev := it.Event().Clone()
		stored[ev.Seq] = ev
		maxSeq = ev.Seq
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var maxUS int64
	for _, ev := range before {
		got, ok := stored[ev.Seq]
		if !ok {
			t.Fatalf("seq %d was handed to a reader and lost in the power cut (%d handed, tip %d)", ev.Seq, len(before), maxSeq)
		}
		if !equalEvents(&got, &ev) {
			t.Fatalf("seq %d changed across the power cut", ev.Seq)
		}
		if ev.TimeUS > maxUS {
			maxUS = ev.TimeUS
		}
	}
	lastHanded := before[len(before)-1].Seq
	t.Logf("handed %d events before the cut; %d survived (tip %d)", len(before), len(stored), maxSeq)
	// The replay index holds exactly the durable rows' entries: none
	// names a row the cut took, none of the survivors lacks one.
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("after the power cut: %v", err)
	}

	w = newWriter(t, s, WriterOptions{Now: func() time.Time { return time.UnixMicro(maxUS - 1e6) }})
	defer w.Close()
	r := apply(t, w, &Unit{Events: []Event{realisticEvent(0)}})
	if r.FirstSeq <= lastHanded {
		t.Fatalf("seq %d reused after the power cut (last handed %d)", r.FirstSeq, lastHanded)
	}
	it, _ = s.Events(r.FirstSeq)
	defer it.Close()
	if !it.Next() || it.Event().TimeUS < maxUS {
		t.Fatalf("TimeUS went backwards across the power cut")
	}
	if !bytes.Equal(it.Event().Record, realisticEvent(0).Record) {
		t.Fatal("new event content")
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("after a write past the cut: %v", err)
	}
}

// TestWriterReceiptMeansSynced: a receipt means the unit is synced, with
// nothing else to sync it. Units applied one by one on a quiet store, then
// the power is cut (the closes' syncs ignored): every unit whose receipt
// came back survives. TestWriterPowerLoss cuts under load, where a
// write-ahead log rotation may sync an unsynced commit before the cut;
// here the last commit's log record has nothing after it.
func TestWriterReceiptMeansSynced(t *testing.T) {
	fs := vfs.NewStrictMem()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	var last uint64
	for i := range 3 {
		last = apply(t, w, &Unit{Events: []Event{realisticEvent(i)}}).LastSeq
	}
	fs.SetIgnoreSyncs(true)
	w.Close()
	s.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)

	s = openMem(t, fs)
	defer s.Close()
	tip, err := s.Tip()
	if err != nil || tip != last {
		t.Fatalf("after the power cut the tip is %d (%v), want %d: units whose receipts came back were lost", tip, err, last)
	}
}
