package archive

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// TestReplacementHoldsOtherProducers (S5): while a multi-unit replacement of
// an account is in progress, another producer's unit touching the account
// waits — with every later unit of that producer, so its order (and its
// cursor) is kept — and is applied right after the replacement's final
// unit; units of other accounts and of other producers pass.
func TestReplacementHoldsOtherProducers(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	ctx := context.Background()
	job, live, other := NewAcks(), NewAcks(), NewAcks()
	submit := func(u *Unit, a *Acks) {
		t.Helper()
		u.Acks = a
		if err := w.Submit(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(a *Acks, n int) []Receipt {
		t.Helper()
		var got []Receipt
		deadline := time.After(5 * time.Second)
		for len(got) < n {
			select {
			case <-a.Ready():
				got = a.Drain(got)
			case <-deadline:
				t.Fatalf("got %d receipts, want %d", len(got), n)
			}
		}
		return got
	}
	none := func(a *Acks) {
		t.Helper()
		time.Sleep(50 * time.Millisecond)
		if r := a.Drain(nil); len(r) != 0 {
			t.Fatalf("held unit applied early: %+v", r)
		}
	}
	rep := func(final bool, rkey string) *Unit {
		return &Unit{Replace: &Replacement{DID: testDID, Rev: "05", Final: final},
			Events: []Event{commitEv(testDID, "05", KindCreate, SourceRetry, rkey)}}
	}
	cur, _ := EncodeSeqCursor(7)
	submit(rep(false, "a"), job)
	wait(job, 1)
	// A live commit of the account (newer than the snapshot) and then a live
	// unit of another account from the same producer: both wait.
	submit(&Unit{Token: "x", Events: []Event{commitEv(testDID, "09", KindCreate, SourceLive, "live")}}, live)
	submit(&Unit{Token: "y", Events: []Event{commitEv(didN(5), "01", KindCreate, SourceLive, "z")}, Puts: []KV{{Key: KeyCursorRelay, Value: cur}}}, live)
	// Another producer's unit of another account passes.
	submit(&Unit{Events: []Event{{Kind: KindIdentity, DID: didN(6), Source: SourceLive}}}, other)
	wait(other, 1)
	none(live)
	if _, err := s.RelayCursor(); err == nil {
		t.Fatal("the held producer's cursor moved before its rows")
	}
	submit(rep(false, "b"), job)
	submit(rep(true, "c"), job)
	wait(job, 2)
	got := wait(live, 2)
	if got[0].Token != "x" || got[1].Token != "y" || got[0].Kept != 1 {
		t.Fatalf("held units: %+v", got)
	}
	// The stream: the replacement's rows, uninterrupted, then the live row.
	it, _ := s.Events(0)
	defer it.Close()
	var seq []string
	for it.Next() {
		if it.Event().DID == testDID {
			seq = append(seq, it.Event().RKey)
		}
	}
	if want := "[a b c live]"; fmtSlice(seq) != want {
		t.Fatalf("account rows %v, want %s", seq, want)
	}
	if c, _ := s.RelayCursor(); c != 7 {
		t.Fatalf("cursor %d", c)
	}
}

func fmtSlice(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}
