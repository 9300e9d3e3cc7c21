package archive

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// rawPut writes keys behind the store's back, to build the shapes the guard
// must recognise.
func rawPut(t *testing.T, fs vfs.FS, kvs map[string][]byte) {
	t.Helper()
	db, err := pebble.Open("/data/store", &pebble.Options{FS: fs, Logger: pebbleLogger{log: quietLogger, onFatal: func(fe *FatalError) { panic(fe) }}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range kvs {
		if v == nil {
			_ = db.Delete([]byte(k), pebble.Sync)
		} else if err := db.Set([]byte(k), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestGuardNewStore(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	if !s.Created() {
		t.Error("new store not reported as created")
	}
	id, err := s.Instance()
	if err != nil || id == (Instance{}) {
		t.Fatalf("instance %x %v", id, err)
	}
	if p, err := s.Phase(); err != nil || p != PhaseBootstrap {
		t.Fatalf("phase %q %v", p, err)
	}
	if _, err := s.Time(KeyPhaseEnteredAt); err != nil {
		t.Fatalf("phase_entered_at: %v", err)
	}
	s.Close()
	// Reopening keeps the identity: it is minted once.
	s = openMem(t, fs)
	defer s.Close()
	if id2, _ := s.Instance(); id2 != id {
		t.Fatal("instance changed across reopen")
	}
	if s.Created() {
		t.Error("existing store reported as created")
	}
}

func TestGuardRefusesDataWithoutIdentity(t *testing.T) {
	phase, _ := EncodePhase(PhaseSteadyState)
	for _, tc := range []struct {
		name    string
		kvs     map[string][]byte
		mention []string
	}{
		{"events, no meta", map[string][]byte{string(EventKey(1)): {1}}, []string{"ev/", "meta/instance or meta/phase"}},
		{"capture, no meta", map[string][]byte{string(CaptureKey(1)): {1}}, []string{"cap/"}},
		{"revs, no meta", map[string][]byte{"rev/did:plc:x": {1, 'r'}}, []string{"rev/"}},
		{"repos, no meta", map[string][]byte{"repo/did:plc:x": {1}}, []string{"repo/"}},
		{"data and phase, no instance", map[string][]byte{"repo/did:plc:x": {1}, "meta/phase": phase}, []string{"no meta/instance", "repo/"}},
		{"data and instance, no phase", map[string][]byte{"ev/x": {1}, "meta/instance": make([]byte, 16)}, []string{"no meta/phase"}},
		{"only a cursor", map[string][]byte{"cursor/relay": {1, 0, 0, 0, 0, 0, 0, 0, 0}}, []string{"other keys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			rawPut(t, fs, tc.kvs)
			_, err := Open("/data", testOptions(fs))
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want ErrRefused", err)
			}
			for _, m := range append(tc.mention, "will not re-bootstrap") {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not mention %q", err, m)
				}
			}
			// Nothing was written: the store still lacks an identity.
			rawPut(t, fs, nil)
			db, _ := pebble.Open("/data/store", &pebble.Options{FS: fs, Logger: pebbleLogger{log: quietLogger}})
			_, c, err := db.Get(KeyInstance)
			if err == nil {
				c.Close()
				if _, ok := tc.kvs["meta/instance"]; !ok {
					t.Error("refused store was given an instance")
				}
			}
			db.Close()
		})
	}
}

func TestGuardRefusesMalformedIdentity(t *testing.T) {
	for name, kvs := range map[string]map[string][]byte{
		"phase unknown":   {"meta/instance": make([]byte, 16), "meta/phase": append([]byte{1}, "booting"...)},
		"phase bare":      {"meta/instance": make([]byte, 16), "meta/phase": []byte("bootstrap")},
		"instance short":  {"meta/instance": make([]byte, 15), "meta/phase": {1, 'm', 'e', 'r', 'g', 'i', 'n', 'g'}},
		"phase, no data ": {"meta/phase": {1}},
	} {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			rawPut(t, fs, kvs)
			_, err := Open("/data", testOptions(fs))
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want ErrRefused", err)
			}
			if !strings.Contains(err.Error(), "meta/") {
				t.Errorf("message %q does not name the key", err)
			}
		})
	}
}

func TestScratchEmptiedNeverBlocks(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	s.Close()
	for _, name := range []string{"/data/scratch/repo-1.car", "/data/scratch/partial"} {
		f, err := fs.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("leftover"))
		f.Close()
	}
	if err := fs.MkdirAll("/data/scratch/sub/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	defer s.Close()
	left, err := fs.List("/data/scratch")
	if err != nil || len(left) != 0 {
		t.Fatalf("scratch holds %v (%v)", left, err)
	}
	// And scratch files on a brand-new data dir are no reason to refuse.
	fs2 := vfs.NewMem()
	fs2.MkdirAll("/data/scratch", 0o755)
	f, _ := fs2.Create("/data/scratch/x")
	f.Close()
	s2 := openMem(t, fs2)
	s2.Close()
}

// TestPhaseReadError injects an I/O error under Pebble when the phase is read
// from an sstable: the outcome is ErrRead (not "missing", not "malformed"),
// and Open refuses rather than initialising a new store over it (C2).
func TestPhaseReadError(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	if err := s.DB().Flush(); err != nil { // the phase now lives in an sstable
		t.Fatal(err)
	}
	s.Close()

	var armed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if armed.Load() && op == errorfs.OpFileReadAt && strings.HasSuffix(path, ".sst") {
			return errors.New("injected EIO")
		}
		return nil
	})
	fs := errorfs.Wrap(mem, inj)

	// Opening with the fault armed: the guard's reads fail, the store is
	// refused, never re-initialised.
	armed.Store(true)
	_, err := Open("/data", testOptions(fs))
	armed.Store(false)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrRead) {
		t.Fatalf("open under EIO: %v, want ErrRefused from ErrRead", err)
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrMalformed) {
		t.Fatalf("read error also reported as missing or malformed: %v", err)
	}
	if !strings.Contains(err.Error(), "meta/phase: store read failed") {
		t.Errorf("error %q does not name the key", err)
	}
	s = openMem(t, mem)
	defer s.Close()
	if s.Created() {
		t.Fatal("store was re-initialised")
	}
}

func TestReadOutcomes(t *testing.T) {
	fs := vfs.NewMem()
	rawPut(t, fs, nil) // create
	s := openMem(t, fs)
	_, err := s.RelayCursor()
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrMalformed) {
		t.Fatalf("absent cursor: %v", err)
	}
	s.Close()
	rawPut(t, fs, map[string][]byte{"cursor/relay": {1, 2, 3}})
	s = openMem(t, fs)
	defer s.Close()
	_, err = s.RelayCursor()
	if !errors.Is(err, ErrMalformed) || errors.Is(err, ErrNotFound) {
		t.Fatalf("short cursor: %v", err)
	}
	if !strings.Contains(err.Error(), "cursor/relay") {
		t.Errorf("error %q does not name the key", err)
	}
}

func TestReadOnlyOpen(t *testing.T) {
	fs := vfs.NewMem()
	if _, err := Open("/data", Options{FS: fs, ReadOnly: true, Logger: quietLogger}); err == nil {
		t.Fatal("read-only open of a missing store succeeded")
	}
	s := openMem(t, fs)
	s.Close()
	ro, err := Open("/data", Options{FS: fs, ReadOnly: true, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if p, err := ro.Phase(); err != nil || p != PhaseBootstrap {
		t.Fatal(p, err)
	}
}
