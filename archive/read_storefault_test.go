package archive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/storefault"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// faultDID is the account every fixture key below is about.
const faultDID = "did:plc:faultfaultfaultfaultfaul"

// buildFaultStore fills a store under /data on fs with one key of every
// family a restart reads: meta (instance, phase, counts), the relay, merge
// and listRepos cursors, repo/, rev/, host/, ev/ and cap/.
func buildFaultStore(t *testing.T, fs vfs.FS) {
	t.Helper()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	list, _ := EncodeListCursor(ListCursor{Cursor: "page-3"})
	apply(t, w, &Unit{
		Events: []Event{commitEv(faultDID, "05", KindCreate, SourceBackfill, "a")},
		Repos: []RepoUpdate{{DID: faultDID, Fields: FieldStatus | FieldActive | FieldBackfillRev,
			State: RepoState{Status: StatusComplete, Active: true, BackfillRev: "05"}}},
		Puts:   []KV{{Key: KeyCursorListRepos, Value: list}},
		Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 41},
		Hosts: []HostUpdate{{Host: "pds.test", Func: func(h HostState) HostState {
			h.ParkedUntilUS, h.LastErrClass = 1<<50, "rate_limited"
			return h
		}}},
	})
	apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorMerge, Seq: 7}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cw := newWriter(t, s, WriterOptions{Capture: true})
	apply(t, cw, &Unit{Events: []Event{commitEv(faultDID, "06", KindCreate, SourceLive, "b")}})
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// faultOptions: a block cache too small to keep any block, so every read
// goes to the filesystem (a block read by the startup guard is not served
// from memory to a later read).
func faultOptions(fs vfs.FS) Options {
	o := testOptions(fs)
	o.CacheSize = 1
	return o
}

// readProbe is one read a restart or a steady component performs, and the
// key it reads.
type readProbe struct {
	key string
	// read performs the read on the faulty fs, calling arm just before
	// the read under test (open itself, for the startup guard's keys).
	read func(t *testing.T, fs vfs.FS, arm func()) error
	// value checks the fault-free outcome.
	value func(t *testing.T, s *Store)
}

func readProbes() []readProbe {
	withStore := func(f func(s *Store) error) func(t *testing.T, fs vfs.FS, arm func()) error {
		return func(t *testing.T, fs vfs.FS, arm func()) error {
			s, err := Open("/data", faultOptions(fs))
			if err != nil {
				return fmt.Errorf("open: %w", err)
			}
			defer s.Close()
			arm()
			return f(s)
		}
	}
	atOpen := func(t *testing.T, fs vfs.FS, arm func()) error {
		arm()
		_, err := Open("/data", faultOptions(fs))
		return err
	}
	return []readProbe{
		{key: "meta/phase",
			read: atOpen,
			value: func(t *testing.T, s *Store) {
				if p, err := s.Phase(); err != nil || p != PhaseBootstrap {
					t.Errorf("phase %q %v", p, err)
				}
			}},
		{key: "meta/instance",
			read: atOpen,
			value: func(t *testing.T, s *Store) {
				if id, err := s.Instance(); err != nil || id == (Instance{}) {
					t.Errorf("instance %x %v", id, err)
				}
			}},
		{key: "cursor/relay",
			read: withStore(func(s *Store) error { _, err := s.RelayCursor(); return err }),
			value: func(t *testing.T, s *Store) {
				if c, err := s.RelayCursor(); err != nil || c != 41 {
					t.Errorf("cursor/relay %d %v", c, err)
				}
			}},
		{key: "cursor/merge",
			read: withStore(func(s *Store) error { _, err := s.MergeCursor(); return err }),
			value: func(t *testing.T, s *Store) {
				if c, err := s.MergeCursor(); err != nil || c != 7 {
					t.Errorf("cursor/merge %d %v", c, err)
				}
			}},
		{key: "cursor/listrepos",
			read: withStore(func(s *Store) error { _, err := s.ListCursor(false); return err }),
			value: func(t *testing.T, s *Store) {
				if c, err := s.ListCursor(false); err != nil || c.Cursor != "page-3" {
					t.Errorf("cursor/listrepos %+v %v", c, err)
				}
			}},
		{key: "repo/" + faultDID,
			read: withStore(func(s *Store) error { _, err := s.RepoState(faultDID); return err }),
			value: func(t *testing.T, s *Store) {
				if st, err := s.RepoState(faultDID); err != nil || st.Status != StatusComplete || st.BackfillRev != "05" {
					t.Errorf("repo state %+v %v", st, err)
				}
			}},
		// The same key through a scan: the streaming read of repo/ (lifecycle's
		// pending pass) fails closed too, not as "no more repos".
		{key: "repo/<scan>",
			read: withStore(func(s *Store) error {
				n := 0
				err := s.ScanRepos(func(string, RepoState) error { n++; return nil })
				if err == nil && n != 1 {
					return fmt.Errorf("scan saw %d repos and no error", n)
				}
				return err
			}),
			value: func(t *testing.T, s *Store) {
				n := 0
				if err := s.ScanRepos(func(string, RepoState) error { n++; return nil }); err != nil || n != 1 {
					t.Errorf("scan: %d repos %v", n, err)
				}
			}},
		{key: "host/pds.test",
			read: withStore(func(s *Store) error { _, err := s.HostState("pds.test"); return err }),
			value: func(t *testing.T, s *Store) {
				if h, err := s.HostState("pds.test"); err != nil || h.ParkedUntilUS != 1<<50 {
					t.Errorf("host state %+v %v", h, err)
				}
			}},
		// The writer's reads: meta/counts when it starts, rev/<did> (the
		// ratchet) when a live row for the account arrives. The writer
		// stops with the error (crash loud); nothing is written.
		{key: "meta/counts",
			read: withStore(func(s *Store) error {
				w, err := NewWriter(s, WriterOptions{Logger: quietLogger})
				if err == nil {
					w.Close()
				}
				return err
			}),
			value: func(t *testing.T, s *Store) {
				if c, err := s.Counts(); err != nil || c.Get(StatusComplete) != 1 {
					t.Errorf("counts %+v %v", c, err)
				}
			}},
		{key: "rev/" + faultDID,
			read: func(t *testing.T, fs vfs.FS, arm func()) error {
				s, err := Open("/data", faultOptions(fs))
				if err != nil {
					return fmt.Errorf("open: %w", err)
				}
				defer s.Close()
				w, err := NewWriter(s, WriterOptions{Logger: quietLogger})
				if err != nil {
					return err
				}
				arm()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := w.Apply(ctx, &Unit{Events: []Event{commitEv(faultDID, "07", KindCreate, SourceLive, "c")}})
				if err == nil && r.Refused == nil {
					w.Close()
					return fmt.Errorf("live row applied over an unreadable ratchet: %+v", r)
				}
				<-w.Done()
				if tip, _ := s.Tip(); tip != 1 {
					return fmt.Errorf("archive tip %d after a failed ratchet read", tip)
				}
				return w.Err()
			},
			value: func(t *testing.T, s *Store) {
				if rev, err := s.Rev(faultDID); err != nil || rev != "05" {
					t.Errorf("rev %q %v", rev, err)
				}
			}},
	}
}

// TestReadFaultPerKey (C2, S6, M2): the read of each key a restart or a
// running component depends on fails with an I/O error under Pebble (errorfs
// on the sstable holding that key alone). Every read fails closed: ErrRead
// (never ErrNotFound, never a default), with a message naming the key; the
// startup guard refuses the store instead of initialising it; the writer
// stops instead of guessing the ratchet. With the fault cleared, every value
// reads back unchanged.
func TestReadFaultPerKey(t *testing.T) {
	for _, p := range readProbes() {
		t.Run(p.key, func(t *testing.T) {
			mem := vfs.NewMem()
			buildFaultStore(t, mem)
			isolate := p.key
			if isolate == "repo/<scan>" {
				isolate = "repo/" + faultDID
			}
			file, err := storefault.IsolateKey(mem, "/data/"+StoreDir, []byte(isolate))
			if err != nil {
				t.Fatal(err)
			}
			inj := storefault.NewReadFault()
			fs := errorfs.Wrap(mem, inj)
			err = p.read(t, fs, func() { inj.FailFiles(file) })
			inj.Disarm()
			if inj.Fired() == 0 {
				t.Fatalf("the fault never fired (read of %s did not reach %s): %v", p.key, file, err)
			}
			if err == nil {
				t.Fatalf("read of %s succeeded under an I/O error", p.key)
			}
			if !errors.Is(err, ErrRead) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMalformed) {
				t.Fatalf("read of %s: %v; want ErrRead only", p.key, err)
			}
			if !strings.Contains(err.Error(), p.key) {
				t.Errorf("error %q does not name %s", err, p.key)
			}
			if strings.HasPrefix(p.key, "meta/phase") || strings.HasPrefix(p.key, "meta/instance") {
				if !errors.Is(err, ErrRefused) {
					t.Errorf("open not refused: %v", err)
				}
			}
			t.Logf("%s: %d reads failed: %v", p.key, inj.Fired(), err)
			s := openMem(t, mem)
			defer s.Close()
			if s.Created() {
				t.Fatal("the store was re-initialised")
			}
			p.value(t, s)
		})
	}
}

// TestReadFaultSweepStartup (C2, C5): every sstable read of a restart — the
// startup guard, the writer's tip and counts, the cursors — fails in turn,
// alone (transient) or with every later read (sticky: a disk gone bad).
// Each run either fails carrying the read error or, once the fault no longer
// fires, succeeds with the right values; never a success with a default.
func TestReadFaultSweepStartup(t *testing.T) {
	mem := vfs.NewMem()
	buildFaultStore(t, mem)
	restart := func(fs vfs.FS) (err error) {
		s, err := Open("/data", faultOptions(fs))
		if err != nil {
			return err
		}
		defer s.Close()
		w, err := NewWriter(s, WriterOptions{Logger: quietLogger})
		if err != nil {
			return err
		}
		defer w.Close()
		if c, err := s.RelayCursor(); err != nil || c != 41 {
			return fmt.Errorf("cursor/relay %d: %w", c, err)
		}
		if c, err := s.MergeCursor(); err != nil || c != 7 {
			return fmt.Errorf("cursor/merge %d: %w", c, err)
		}
		if st, err := s.RepoState(faultDID); err != nil || st.Status != StatusComplete {
			return fmt.Errorf("repo state %+v: %w", st, err)
		}
		if p, err := s.Phase(); err != nil || p != PhaseBootstrap {
			return fmt.Errorf("phase %q: %w", p, err)
		}
		return nil
	}
	for _, mode := range []string{"transient", "sticky"} {
		t.Run(mode, func(t *testing.T) {
			n := 1
			for ; n < 500; n++ {
				inj := storefault.NewReadFault()
				if mode == "sticky" {
					inj.FailFromNth(n)
				} else {
					inj.FailNth(n)
				}
				err := restart(errorfs.Wrap(mem, inj))
				inj.Disarm()
				if inj.Fired() == 0 {
					if err != nil {
						t.Fatalf("n=%d: no fault fired, yet: %v", n, err)
					}
					break
				}
				if err == nil {
					t.Fatalf("n=%d: read %d failed and the restart succeeded", n, n)
				}
				if !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("n=%d: %v; want the read failure", n, err)
				}
			}
			if n < 5 {
				t.Fatalf("sweep ended after %d reads: the restart barely read the store", n-1)
			}
			t.Logf("swept %d sstable reads of a restart", n-1)
		})
	}
}

// TestMalformedPerKey (C2): a present but undecodable value of each key is
// ErrMalformed naming the key (never absent, never a default).
func TestMalformedPerKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		read func(s *Store) error
	}{
		{"cursor/relay", func(s *Store) error { _, err := s.RelayCursor(); return err }},
		{"cursor/merge", func(s *Store) error { _, err := s.MergeCursor(); return err }},
		{"cursor/listrepos", func(s *Store) error { _, err := s.ListCursor(false); return err }},
		{"repo/" + faultDID, func(s *Store) error { _, err := s.RepoState(faultDID); return err }},
		{"rev/" + faultDID, func(s *Store) error { _, err := s.Rev(faultDID); return err }},
		{"host/pds.test", func(s *Store) error { _, err := s.HostState("pds.test"); return err }},
		{"meta/counts", func(s *Store) error { _, err := NewWriter(s, WriterOptions{Logger: quietLogger}); return err }},
	} {
		for _, bad := range [][]byte{{}, {0x09}, {0x01}, {0xff, 0xff, 0xff}} {
			t.Run(fmt.Sprintf("%s/%x", tc.key, bad), func(t *testing.T) {
				mem := vfs.NewMem()
				buildFaultStore(t, mem)
				rawPut(t, mem, map[string][]byte{tc.key: bad})
				s := openMem(t, mem)
				defer s.Close()
				err := tc.read(s)
				if !errors.Is(err, ErrMalformed) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrRead) {
					t.Fatalf("%v; want ErrMalformed only", err)
				}
				if !strings.Contains(err.Error(), tc.key) {
					t.Errorf("error %q does not name %s", err, tc.key)
				}
			})
		}
	}
}
