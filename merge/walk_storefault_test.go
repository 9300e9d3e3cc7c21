package merge

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
)

// sfOpts opens a store on fs whose fatal Pebble errors panic (recovered by
// the writer) and whose block cache keeps nothing, so every read reaches fs.
func sfOpts(fs vfs.FS) archive.Options {
	return archive.Options{FS: fs, Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }, CacheSize: 1}
}

func sfRow(did, rev string, kind archive.Kind, rkey string) archive.Event {
	ev := archive.Event{Kind: kind, DID: did, Collection: "app.bsky.feed.post", RKey: rkey, Rev: rev, Source: archive.SourceLive}
	if kind != archive.KindDelete {
		ev.CID, ev.Record = []byte{1, 0x71, 0x12, 0x20, 9}, []byte{0xa0}
	}
	return ev
}

// buildMergeStore leaves under /data on mem a store at the end of bootstrap:
// repos in every status (some with snapshots), and a capture of commits
// older, equal and newer than the snapshots, multi-op commits, identity,
// account and sync events — flushed, so that reads go to sstables.
func buildMergeStore(t *testing.T, mem vfs.FS) {
	t.Helper()
	s, err := archive.Open("/data", sfOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	cw, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, Capture: true})
	ctx := context.Background()
	must := func(w *archive.Writer, u *archive.Unit) {
		t.Helper()
		if r, err := w.Apply(ctx, u); err != nil || r.Refused != nil {
			t.Fatal(err, r.Refused)
		}
	}
	statuses := []archive.RepoStatus{archive.StatusComplete, archive.StatusPending, archive.StatusFailed, archive.StatusComplete}
	var dids []string
	for i := 0; i < 8; i++ {
		did := fmt.Sprintf("did:plc:merge%019d", i)
		dids = append(dids, did)
		st := archive.RepoState{Status: statuses[i%len(statuses)], Active: true}
		u := &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldBackfillRev, State: st}}}
		if st.Status == archive.StatusComplete {
			u.Repos[0].State.BackfillRev = "05"
			snap := sfRow(did, "05", archive.KindCreate, "snap")
			snap.Source = archive.SourceBackfill
			u.Events = []archive.Event{snap}
		}
		must(w, u)
	}
	up := int64(0)
	capture := func(evs ...archive.Event) {
		up++
		for i := range evs {
			evs[i].UpstreamSeq = up
		}
		must(cw, &archive.Unit{Events: evs, Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: uint64(up)}})
	}
	for round := 0; round < 3; round++ {
		for _, did := range dids {
			capture(sfRow(did, "03", archive.KindCreate, "a"))
			capture(sfRow(did, "05", archive.KindUpdate, "a"))
			capture(sfRow(did, fmt.Sprintf("07%d", round), archive.KindCreate, "b"), sfRow(did, fmt.Sprintf("07%d", round), archive.KindDelete, "a"))
			capture(archive.Event{Kind: archive.KindIdentity, DID: did, Handle: "h.test", Source: archive.SourceLive})
		}
	}
	capture(archive.Event{Kind: archive.KindSync, DID: dids[0], Rev: "09", Source: archive.SourceLive})
	capture(archive.Event{Kind: archive.KindAccount, DID: dids[1], Active: false, Status: "deactivated", Source: archive.SourceLive})
	cw.Close()
	w.Close()
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// mergeOutcome is what a walk leaves: the merged rows, the ratchets, the
// repo states and cursor/merge.
func mergeOutcome(t *testing.T, s *archive.Store) string {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := ""
	for it.Next() {
		ev := it.Event()
		if ev.Source == archive.SourceMerge {
			out += fmt.Sprintf("%d:%s %s@%s/%s %s|", ev.Seq, ev.DID[len(ev.DID)-2:], ev.Kind, ev.Rev, ev.RKey, ev.Handle)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	err = s.ScanRepos(func(did string, st archive.RepoState) error {
		rev, _ := s.Rev(did)
		out += fmt.Sprintf("\n%s %v active=%v refetch=%v rev=%s", did, st.Status, st.Active, st.Refetch, rev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.MergeCursor()
	tip, _ := s.CaptureTip()
	return out + fmt.Sprintf("\ncursor/merge %d (%v) of %d", c, err, tip)
}

// walkOnce opens the store on fs, walks with small units and closes
// everything; arm runs once the writer has started.
func walkOnce(t *testing.T, fs vfs.FS, arm func()) (Stats, error) {
	s, err := archive.Open("/data", sfOpts(fs))
	if err != nil {
		return Stats{}, err
	}
	defer func() {
		defer func() { recover() }() // Pebble may panic closing after a fatal write
		s.Close()
	}()
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		return Stats{}, err
	}
	defer w.Close()
	arm()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return Walk(ctx, Config{Store: s, Writer: w, MaxRows: 3, InFlight: 2, Logger: quiet, Now: func() time.Time { return time.Unix(1000, 0) }})
}

func outcomeOf(t *testing.T, mem vfs.FS) string {
	s, err := archive.Open("/data", sfOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return mergeOutcome(t, s)
}

// TestWalkReadFaultSweep (M2, M4, C2): every sstable read of a walk — the
// merge cursor, the capture log, the ratchets and repo states the writer
// consults — fails in turn, alone (transient) or with every later read
// (sticky). Each walk either stops with an error or, once the fault no
// longer fires, finishes; never a walk that "finishes" over an unreadable
// capture. A restarted walk without the fault then converges to exactly
// the archive of a fault-free walk: no row twice, none lost (M4).
func TestWalkReadFaultSweep(t *testing.T) {
	base := vfs.NewMem()
	buildMergeStore(t, base)
	refFS := vfs.NewMem()
	copyFS(t, base, refFS)
	if _, err := walkOnce(t, refFS, func() {}); err != nil {
		t.Fatal(err)
	}
	want := outcomeOf(t, refFS)

	for _, mode := range []string{"transient", "sticky"} {
		t.Run(mode, func(t *testing.T) {
			n := 1
			for ; n < 2000; n++ {
				mem := vfs.NewMem()
				copyFS(t, base, mem)
				inj := storefault.NewReadFault()
				_, err := walkOnce(t, errorfs.Wrap(mem, inj), func() {
					if mode == "sticky" {
						inj.FailFromNth(n)
					} else {
						inj.FailNth(n)
					}
				})
				inj.Disarm()
				if inj.Fired() == 0 {
					if err != nil {
						t.Fatalf("n=%d: no fault fired, yet: %v", n, err)
					}
					break
				}
				if err == nil {
					t.Fatalf("n=%d: read %d failed and the walk reported success", n, n)
				}
				if !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("n=%d: %v: the error does not carry the read failure", n, err)
				}
				if _, err := walkOnce(t, mem, func() {}); err != nil {
					t.Fatalf("n=%d: restarted walk: %v", n, err)
				}
				if got := outcomeOf(t, mem); got != want {
					t.Fatalf("n=%d: after the restart the archive differs from a fault-free walk:\n got %s\nwant %s", n, got, want)
				}
			}
			if n < 10 {
				t.Fatalf("sweep ended after %d reads: the walk barely read the store", n)
			}
			t.Logf("swept %d sstable reads of a walk", n-1)
		})
	}
}

// copyFS copies the data dir of src to dst (Pebble's vfs.Clone).
func copyFS(t *testing.T, src, dst vfs.FS) {
	t.Helper()
	if _, err := vfs.Clone(src, dst, "/data", "/data"); err != nil {
		t.Fatal(err)
	}
}
