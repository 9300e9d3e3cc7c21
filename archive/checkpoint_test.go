package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/internal/diskspace"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// fillUnit is one unit of n create rows for did, with a repo update so the
// checkpoint has repo/ and meta/counts to compare too.
func fillUnit(did string, rev int, n int) *Unit {
	u := &Unit{}
	for i := 0; i < n; i++ {
		u.Events = append(u.Events, commitEv(did, fmt.Sprintf("3m%011d", rev), KindCreate, SourceBackfill, fmt.Sprintf("r%d-%d", rev, i)))
	}
	u.Repos = []RepoUpdate{{DID: did, Fields: FieldStatus, State: RepoState{Status: StatusComplete, Active: true}}}
	return u
}

// sameEvents asserts that every event of ck equals live's event at the same
// seq, and returns ck's tip.
func sameEvents(t *testing.T, ck, live *Store) uint64 {
	t.Helper()
	it, err := ck.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	lit, err := live.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer lit.Close()
	var n, last uint64
	for it.Next() {
		if !lit.Next() {
			t.Fatalf("checkpoint holds seq %d, the live store ends before it: %v", it.Event().Seq, lit.Err())
		}
		a, b := it.Event(), lit.Event()
		if !equalEvents(a, b) {
			t.Fatalf("seq %d differs:\ncheckpoint %+v\nlive       %+v", a.Seq, *a, *b)
		}
		if a.Seq != last+1 {
			t.Fatalf("checkpoint has a gap: %d after %d", a.Seq, last)
		}
		last = a.Seq
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return last
}

// TestCheckpointWhileWriting: a checkpoint taken while the writer commits
// is a store Open accepts, with the live store's identity, relay and phase,
// a tip at most the live tip, every event equal to the live one at its seq,
// and repo counts that match its own repo/ rows (one consistent instant).
func TestCheckpointWhileWriting(t *testing.T) {
	base := t.TempDir()
	opts := testOptions(nil)
	live, err := Open(filepath.Join(base, "data"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := live.SetRelay("relay.test", false); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, live, WriterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ctx.Err() == nil; i++ {
			if _, err := w.Apply(ctx, fillUnit(didN(i%50), i, 1+i%7)); err != nil && ctx.Err() == nil {
				t.Errorf("apply: %v", err)
				return
			}
		}
	}()
	waitTip := func(min uint64) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if tip, _ := live.Tip(); tip >= min {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("writer never reached seq %d", min)
			}
		}
	}
	waitTip(500)
	ckDir := filepath.Join(base, "backups", "one") // missing parents are created
	if err := live.Checkpoint(ckDir); err != nil {
		t.Fatal(err)
	}
	waitTip(1000) // keeps writing after the checkpoint
	cancel()
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := os.Stat(filepath.Join(ckDir, checkpointPartial)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind: %v", checkpointPartial, err)
	}
	ck, err := Open(ckDir, opts)
	if err != nil {
		t.Fatalf("the checkpoint does not open as a store: %v", err)
	}
	defer ck.Close()
	if ck.Created() {
		t.Fatal("Open initialised the checkpoint as a new store")
	}
	li, _ := live.Instance()
	ci, err := ck.Instance()
	if err != nil || ci != li {
		t.Fatalf("instance %x, want %x (%v)", ci, li, err)
	}
	if p, err := ck.Phase(); err != nil || p != PhaseBootstrap {
		t.Fatalf("phase %q (%v)", p, err)
	}
	if r, err := ck.Relay(); err != nil || r != "relay.test" {
		t.Fatalf("relay %q (%v)", r, err)
	}
	liveTip, _ := live.Tip()
	ckTip, err := ck.Tip()
	if err != nil {
		t.Fatal(err)
	}
	if ckTip < 500 || ckTip >= liveTip {
		t.Fatalf("checkpoint tip %d, want in [500, live tip %d)", ckTip, liveTip)
	}
	if got := sameEvents(t, ck, live); got != ckTip {
		t.Fatalf("last event %d, tip %d", got, ckTip)
	}
	// meta/counts and repo/ rows come from the same instant.
	counts, err := ck.Counts()
	if err != nil {
		t.Fatal(err)
	}
	var repos int64
	if err := ck.ScanRepos(func(string, RepoState) error { repos++; return nil }); err != nil {
		t.Fatal(err)
	}
	if counts.Total() != repos || repos == 0 {
		t.Fatalf("checkpoint counts say %d repos, repo/ holds %d", counts.Total(), repos)
	}
	// The checkpoint is a store of its own: it takes writes.
	w2 := newWriter(t, ck, WriterOptions{})
	r := apply(t, w2, fillUnit(didN(7), 1<<30, 1))
	if r.FirstSeq != ckTip+1 {
		t.Fatalf("first write to the checkpoint got seq %d, want %d", r.FirstSeq, ckTip+1)
	}
	w2.Close()
	t.Logf("checkpoint at tip %d while the live store went on to %d", ckTip, liveTip)
}

// TestCheckpointOfReadOnlyStore: Pebble cannot checkpoint a read-only open
// (it wrote no OPTIONS file); the refusal is typed and writes nothing.
func TestCheckpointOfReadOnlyStore(t *testing.T) {
	base := t.TempDir()
	opts := testOptions(nil)
	s, err := Open(filepath.Join(base, "data"), opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro := opts
	ro.ReadOnly = true
	s, err = Open(filepath.Join(base, "data"), ro)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Checkpoint(filepath.Join(base, "ck")); !errors.Is(err, ErrCheckpointReadOnly) {
		t.Fatalf("read-only checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "ck")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused checkpoint wrote %s: %v", filepath.Join(base, "ck"), err)
	}
}

// TestCheckpointRefusesDestinations: an existing non-empty directory, a
// file, the data dir, and anything inside store/ or scratch/ are refused
// with ErrCheckpointDest and left untouched; an existing empty directory is
// accepted.
func TestCheckpointRefusesDestinations(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	s, err := Open(data, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	full := filepath.Join(base, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{
		full, file, data,
		filepath.Join(data, "store"),
		filepath.Join(data, "store", "x"),
		filepath.Join(data, "scratch", "x"),
		filepath.Join(data, "store", "..", "store"),
		"",
	} {
		err := s.Checkpoint(dest)
		if !errors.Is(err, ErrCheckpointDest) {
			t.Errorf("Checkpoint(%q) = %v, want ErrCheckpointDest", dest, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "x" {
		t.Fatalf("refused destination was touched: %q %v", b, err)
	}
	if names, _ := os.ReadDir(full); len(names) != 1 {
		t.Fatalf("refused destination holds %d entries", len(names))
	}
	if _, err := os.Stat(filepath.Join(data, "store", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a checkpoint was written inside the store: %v", err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(empty); err != nil {
		t.Fatalf("empty existing directory: %v", err)
	}
	// A second checkpoint to the same place is refused: never overwritten.
	if err := s.Checkpoint(empty); !errors.Is(err, ErrCheckpointDest) {
		t.Fatalf("second checkpoint to %s: %v", empty, err)
	}
}

// TestCheckpointPowerLoss: once Checkpoint returns, the checkpoint survives
// a power loss (strict MemFS reset to what was synced) and opens with the
// events it held, renamed into place (the store's filesystem) or copied
// (another one).
func TestCheckpointPowerLoss(t *testing.T) {
	for _, copied := range []bool{false, true} {
		fs := vfs.NewStrictMem()
		var live vfs.FS = fs
		if copied {
			live = elsewhere(fs)
		}
		s := openMem(t, live)
		w := newWriter(t, s, WriterOptions{})
		for i := 1; i <= 20; i++ {
			apply(t, w, fillUnit(didN(i), i, 5))
		}
		if err := s.Checkpoint("/backups/b1"); err != nil {
			t.Fatal(err)
		}
		fs.SetIgnoreSyncs(true)
		w.Close()
		s.Close()
		fs.ResetToSyncedState()
		fs.SetIgnoreSyncs(false)

		ro := testOptions(fs)
		ro.ReadOnly = true
		ck, err := Open("/backups/b1", ro)
		if err != nil {
			t.Fatalf("checkpoint (copied: %v) lost to a power loss: %v", copied, err)
		}
		if tip, err := ck.Tip(); err != nil || tip != 100 {
			t.Fatalf("checkpoint (copied: %v) tip after power loss %d (%v), want 100", copied, tip, err)
		}
		ck.Close()
	}
}

// TestOpenRefusesInterruptedCheckpoint: a checkpoint that crashed mid-way
// leaves store.partial and no store/. Opening that data dir (an operator
// restoring from it) is refused, naming it, instead of creating a new
// store there and bootstrapping from nothing.
func TestOpenRefusesInterruptedCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/backups/b1/"+checkpointPartial, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Open("/backups/b1", testOptions(fs))
	if err == nil || !strings.Contains(err.Error(), "never completed") {
		t.Fatalf("open of an interrupted checkpoint: %v, want it refused", err)
	}
	if _, err := fs.Stat("/backups/b1/" + StoreDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a store was created beside the interrupted checkpoint (%v)", err)
	}
}

// TestReadOnlyOpenNamesInterruptedCheckpoint: the read-only open of a data
// dir holding only store.partial (`backstream status`, `checkpoint
// --data-dir` and `compaction reset` on a checkpoint that crashed mid-way)
// says so, as the writable open does, not only that no store is there. An
// empty data dir is still "no store here".
func TestReadOnlyOpenNamesInterruptedCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/backups/b1/"+checkpointPartial, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/backups/empty", 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(fs)
	opts.ReadOnly = true
	_, err := Open("/backups/b1", opts)
	if err == nil || !strings.Contains(err.Error(), "never completed") || !strings.Contains(err.Error(), "/backups/b1/"+checkpointPartial) {
		t.Fatalf("read-only open of an interrupted checkpoint: %v, want it named (store.partial, never completed)", err)
	}
	if _, err := Open("/backups/empty", opts); err == nil || !strings.Contains(err.Error(), "no store here") {
		t.Fatalf("read-only open of an empty data dir: %v, want \"no store here\"", err)
	}
	if _, err := fs.Stat("/backups/b1/" + StoreDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only open created a store beside the interrupted checkpoint (%v)", err)
	}
}

// TestCheckpointFailureLeavesNothing: a checkpoint whose destination volume
// (another filesystem: the checkpoint is copied) is full (ENOSPC on every
// write under it)
// returns the error and leaves nothing of its own behind: a destination it
// created is removed, an empty one it was given stays empty; the live
// store goes on, and the next checkpoint to the same place succeeds.
func TestCheckpointFailureLeavesNothing(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	fs := errorfs.Wrap(elsewhere(mem), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && op == errorfs.OpFileWrite && strings.HasPrefix(path, "/backups/") {
			return syscall.ENOSPC
		}
		return nil
	}))
	s := openMem(t, fs)
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	for i := 0; i < 10; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	if err := mem.MkdirAll("/backups/given", 0o755); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	for _, dir := range []string{"/backups/new", "/backups/given"} {
		err := s.Checkpoint(dir)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("checkpoint to %s on a full volume: %v, want ENOSPC", dir, err)
		}
		names, lerr := mem.List(dir)
		if dir == "/backups/new" && !errors.Is(lerr, os.ErrNotExist) {
			t.Fatalf("after a failed checkpoint %s holds %v (%v), want it removed", dir, names, lerr)
		}
		if dir == "/backups/given" && (lerr != nil || len(names) != 0) {
			t.Fatalf("after a failed checkpoint the given %s holds %v (%v), want it empty", dir, names, lerr)
		}
		if names, err := mem.List("/data/" + StoreDir + "/" + checkpointStaging); err != nil || len(names) != 0 {
			t.Fatalf("after a failed checkpoint the staging dir holds %v (%v), want the staged copy removed", names, err)
		}
	}
	full.Store(false)
	apply(t, w, &Unit{Events: []Event{realisticEvent(10)}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/backups/new", "/backups/given"} {
		if err := s.Checkpoint(dir); err != nil {
			t.Fatalf("checkpoint to %s once there is room: %v", dir, err)
		}
	}
}

// TestCheckpointStagingInStoreDir: checkpoints are staged in the store
// dir's checkpoint-staging/, which Pebble and the store ignore. One a
// crash left there (Pebble's checkpoint of the store, not yet moved) is
// untouched by flushes, compactions and their deletion of the tables it
// links, and is no part of a checkpoint of the store that holds it; a
// read-only open (status, the check before a command) accepts the store,
// counts its size and leaves the staged copy; a writable open removes it.
func TestCheckpointStagingInStoreDir(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	for i := 1; i <= 20; i++ {
		apply(t, w, fillUnit(didN(i), i, 5))
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	left := "/data/" + StoreDir + "/" + checkpointStaging + "/7"
	if err := s.DB().Checkpoint(left); err != nil {
		t.Fatal(err)
	}
	staged, err := fs.List(left)
	if err != nil || len(staged) == 0 {
		t.Fatalf("staged checkpoint holds %v (%v)", staged, err)
	}
	slices.Sort(staged)
	for i := 21; i <= 40; i++ {
		apply(t, w, fillUnit(didN(i), i, 5))
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Compact([]byte{0}, []byte{0xff, 0xff}, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Pebble deletes the tables a compaction replaced on a goroutine of its
	// own: wait until one the staged copy links is gone from the store.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var gone bool
		for _, name := range staged {
			if _, err := fs.Stat("/data/" + StoreDir + "/" + name); strings.HasSuffix(name, ".sst") && errors.Is(err, os.ErrNotExist) {
				gone = true
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			all, _ := fs.List("/data/" + StoreDir)
			t.Fatalf("10 s after the compaction the store still holds every staged table of %v (%v): the test proves nothing", staged, all)
		}
	}
	same := func(when string) {
		t.Helper()
		now, err := fs.List(left)
		slices.Sort(now)
		if err != nil || !slices.Equal(now, staged) {
			t.Fatalf("%s the staged checkpoint holds %v (%v), want %v untouched", when, now, err, staged)
		}
	}
	same("after a compaction")
	if err := s.Checkpoint("/backups/b1"); err != nil {
		t.Fatalf("checkpoint of a store holding a staged one: %v", err)
	}
	if names, err := fs.List("/backups/b1/" + StoreDir); err != nil || strings.Contains(strings.Join(names, " "), checkpointStaging) {
		t.Fatalf("the checkpoint holds %v (%v), want no staging dir in it", names, err)
	}
	ro := testOptions(fs)
	ro.ReadOnly = true
	ck, err := Open("/backups/b1", ro)
	if err != nil {
		t.Fatal(err)
	}
	if tip := sameEvents(t, ck, s); tip != 200 {
		t.Fatalf("checkpoint tip %d, want 200", tip)
	}
	ck.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	same("after the store's close")

	r, err := Open("/data", ro)
	if err != nil {
		t.Fatalf("read-only open of a store holding a staged checkpoint: %v", err)
	}
	if n, err := r.DiskBytes(); err != nil || n == 0 {
		t.Fatalf("size of a store holding a staged checkpoint: %d (%v)", n, err)
	}
	if tip, err := r.Tip(); err != nil || tip != 200 {
		t.Fatalf("read-only tip %d (%v), want 200", tip, err)
	}
	r.Close()
	same("after a read-only open")

	s = openMem(t, fs)
	defer s.Close()
	if _, err := fs.Stat("/data/" + StoreDir + "/" + checkpointStaging); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after a writable open the staging dir is still there (%v), want it removed", err)
	}
	if tip, err := s.Tip(); err != nil || tip != 200 {
		t.Fatalf("tip after the open %d (%v), want 200", tip, err)
	}
}

// TestCheckpointRoomToStage: Pebble's checkpoint copies the write-ahead
// logs, the manifest and the options file into the staging dir on the
// store's own volume (its tables are links). A checkpoint whose copies
// would take that volume below the store's free-space floor is refused
// with ErrCheckpointNoRoom before it writes anything, and the live store
// records no fault; with room it goes ahead.
func TestCheckpointRoomToStage(t *testing.T) {
	base := t.TempDir()
	var free atomic.Uint64
	opts := testOptions(nil)
	opts.MinFree = 1 << 30
	opts.Space = func(string) (diskspace.Space, error) {
		return diskspace.Space{Free: free.Load(), Total: 100 << 30}, nil
	}
	free.Store(10 << 30)
	s, err := Open(filepath.Join(base, "data"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := NewWriter(s, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Apply(context.Background(), fillUnit("did:plc:room", 1, 2000)); err != nil {
		t.Fatal(err)
	}
	staged := s.stagedCopyBytes()
	if staged < 64<<10 {
		t.Fatalf("the store's logs and manifest take %d bytes; want the rows in its log (at least 64 KiB)", staged)
	}
	free.Store(1<<30 + staged/2) // above the floor, not by the copies
	dir := filepath.Join(base, "ck1")
	err = s.Checkpoint(dir)
	if !errors.Is(err, ErrCheckpointNoRoom) || !strings.Contains(err.Error(), "--min-free") {
		t.Fatalf("a checkpoint whose %d staged bytes would take the store's volume below its floor: %v; want ErrCheckpointNoRoom naming --min-free", staged, err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("the refused checkpoint wrote %s: %v", dir, serr)
	}
	if names, _ := os.ReadDir(filepath.Join(base, "data", StoreDir, checkpointStaging)); len(names) > 0 {
		t.Fatalf("the refused checkpoint staged %d entries", len(names))
	}
	if f := s.Fault(); f != nil {
		t.Fatalf("the refusal is a fault of the live store: %v", f)
	}
	free.Store(1<<30 + 2*staged)
	if err := s.Checkpoint(filepath.Join(base, "ck2")); err != nil {
		t.Fatalf("a checkpoint with room for its staged copies: %v", err)
	}
}
