package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/storefault"

	"github.com/cockroachdb/pebble/vfs"
)

// hookOptions opens a store whose synced batches pass through f.
func hookOptions(fs vfs.FS, f *storefault.CommitFault) Options {
	o := testOptions(fs)
	o.CommitHook = f.Check
	return o
}

// faultUnit is unit i of the workload below: a live row of its own account
// (touches ev/ and rev/), every third one a repo update (repo/, meta/counts),
// every unit a cursor (cursor/), every fifth a host update (host/), unit 7
// the phase (meta/phase).
func faultUnit(i int) *Unit {
	did := didN(i)
	u := &Unit{Events: []Event{commitEv(did, fmt.Sprintf("3k%03d", i), KindCreate, SourceLive, "r")}}
	u.Cursor = SeqCursor{Key: KeyCursorRelay, Seq: uint64(i + 1)}
	if i%3 == 0 {
		u.Repos = []RepoUpdate{{DID: did, Fields: FieldStatus | FieldActive, State: RepoState{Status: StatusComplete, Active: true}}}
	}
	if i%5 == 0 {
		u.Hosts = []HostUpdate{{Host: "pds.test", Func: func(h HostState) HostState {
			h.ParkedUntilUS = int64(i)
			return h
		}}}
	}
	if i == 7 {
		pv, _ := EncodePhase(PhaseMerging)
		u.Puts = append(u.Puts, KV{Key: KeyPhase, Value: pv}, KV{Key: KeyPhaseEnteredAt, Value: EncodeTime(time.Unix(100, 0))})
	}
	return u
}

const faultUnits = 12

// TestCommitFaultSweep (D1, R4, C1): the n-th synced batch
// touching each key prefix fails. The writer stops with a fatal error naming
// the data dir (Submit fails from then on, no receipt for the failed unit,
// nothing of it published); the failed batch left nothing in the store; a
// restart without the fault keeps every acknowledged unit, continues the
// seqs after them, and converges to the same archive as a run without
// faults once the unacknowledged units are submitted again.
func TestCommitFaultSweep(t *testing.T) {
	// Reference: the workload without faults.
	ref := func() []Event {
		s := openMem(t, vfs.NewMem())
		defer s.Close()
		w := newWriter(t, s, WriterOptions{})
		for i := 0; i < faultUnits; i++ {
			apply(t, w, faultUnit(i))
		}
		w.Close()
		return logOf(t, s)
	}()
	for _, prefix := range []string{"ev/", "rev/", "repo/", "meta/counts", "cursor/relay", "host/", "meta/phase"} {
		for n := 1; n <= 3; n++ {
			t.Run(fmt.Sprintf("%s#%d", prefix, n), func(t *testing.T) {
				mem := vfs.NewMem()
				f := storefault.FailNthCommit(prefix, n)
				s, err := Open("/data", hookOptions(mem, f))
				if err != nil {
					t.Fatal(err)
				}
				w := newWriter(t, s, WriterOptions{})
				acked := 0
				var failedAt int
				for i := 0; i < faultUnits; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					r, err := w.Apply(ctx, faultUnit(i))
					cancel()
					if err != nil {
						failedAt = i
						break
					}
					if r.Refused != nil {
						t.Fatalf("unit %d refused: %v", i, r.Refused)
					}
					acked++
				}
				if f.Fired() == 0 {
					if prefix == "meta/phase" && n > 1 {
						return // only one batch sets the phase
					}
					t.Fatalf("fault never fired (%d matching batches)", f.Seen())
				}
				werr := w.Err()
				if werr == nil || !errors.Is(werr, storefault.ErrInjected) || !strings.Contains(werr.Error(), "/data") {
					t.Fatalf("writer error %v: want the injected fault, naming the data dir", werr)
				}
				if acked != failedAt {
					t.Fatalf("acked %d, failed at unit %d", acked, failedAt)
				}
				if err := w.Submit(context.Background(), faultUnit(0)); err == nil {
					t.Fatal("Submit accepted a unit after a fatal commit error")
				}
				if tip := w.Live().Tip(); tip != uint64(acked) {
					t.Fatalf("live tip %d, acked %d: the failed batch was published", tip, acked)
				}
				w.Close()
				s.Close()

				// Restart without the fault: exactly the acknowledged units are
				// there, and resubmitting the rest converges.
				s2 := openMem(t, mem)
				defer s2.Close()
				if tip, _ := s2.Tip(); tip != uint64(acked) {
					t.Fatalf("durable tip %d after restart, acked %d (the failed batch was applied, or an acked one lost)", tip, acked)
				}
				if c, err := s2.RelayCursor(); acked > 0 && (err != nil || c != uint64(acked)) {
					t.Fatalf("cursor/relay %d (%v), want %d: the cursor and its rows disagree", c, err, acked)
				}
				w2 := newWriter(t, s2, WriterOptions{})
				for i := acked; i < faultUnits; i++ {
					if r := apply(t, w2, faultUnit(i)); r.FirstSeq != uint64(i+1) {
						t.Fatalf("unit %d at seq %d after restart", i, r.FirstSeq)
					}
				}
				w2.Close()
				if got := logOf(t, s2); !sameLog(got, ref) {
					t.Fatalf("after restart the archive differs from the fault-free run:\n got %v\nwant %v", got, ref)
				}
				c, _ := s2.Counts()
				if c.Get(StatusComplete) != int64((faultUnits+2)/3) {
					t.Fatalf("counts %+v after restart", c)
				}
			})
		}
	}
}

// TestCommitFaultDiskFull: a commit failing with ENOSPC is named as a full
// disk, with the data dir and what to do, and wraps the errno.
func TestCommitFaultDiskFull(t *testing.T) {
	mem := vfs.NewMem()
	f := storefault.FailNthCommit("ev/", 2).WithError(syscall.ENOSPC)
	s, err := Open("/data", hookOptions(mem, f))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	apply(t, w, faultUnit(0))
	_, err = w.Apply(context.Background(), faultUnit(1))
	if err == nil {
		t.Fatal("second unit applied on a full disk")
	}
	err = w.Err()
	for _, want := range []string{"disk full", "/data", "free space", "restart"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error does not wrap ENOSPC: %v", err)
	}
}

// TestCommitFaultStoreBatches (C4, M7, C6): the store's own synced batches
// (the cleanup that ends merging, recording the relay) fail as a whole
// through the same seam; nothing of them is applied.
func TestCommitFaultStoreBatches(t *testing.T) {
	mem := vfs.NewMem()
	f := storefault.FailNthCommit("meta/phase", 1)
	s, err := Open("/data", hookOptions(mem, f))
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, s, WriterOptions{Capture: true})
	apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: testDID, Source: SourceLive}}})
	w.Close()
	err = s.CommitSteadyState(time.Unix(5, 0))
	if !errors.Is(err, storefault.ErrInjected) || !strings.Contains(err.Error(), "/data") {
		t.Fatalf("CommitSteadyState: %v", err)
	}
	if p, _ := s.Phase(); p != PhaseBootstrap {
		t.Fatalf("phase %s after a failed cleanup", p)
	}
	if tip, _ := s.CaptureTip(); tip != 1 {
		t.Fatalf("capture tip %d after a failed cleanup: the range delete was applied", tip)
	}
	f2 := storefault.FailNthCommit("meta/relay", 1)
	s.hook = f2.Check
	if err := s.SetRelay("relay.test", true); !errors.Is(err, storefault.ErrInjected) {
		t.Fatalf("SetRelay: %v", err)
	}
	if _, err := s.Relay(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("relay recorded by a failed batch: %v", err)
	}
	s.Close()
}

func logOf(t *testing.T, s *Store) []Event {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []Event
	for it.Next() {
		ev := it.Event().Clone()
		ev.TimeUS = 0
		out = append(out, ev)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameLog(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Seq != y.Seq || x.DID != y.DID || x.Rev != y.Rev || x.Kind != y.Kind || x.RKey != y.RKey {
			return false
		}
	}
	return true
}
