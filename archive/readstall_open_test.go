package archive

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/internal/diskspace"
)

// TestStuckOpenStepIsAFault: each of Open's own calls before Pebble starts
// — making or finding the store dir, taking its LOCK file, emptying the
// scratch dir, the free-space query; a read-only open's stat of the store
// dir and its lock — over a volume that stops answering it (no error, no
// end) is the store's read-stall fault once it has been out for
// MaxWriteStall, handed to OnFault while the open is still blocked in it,
// so that Use (and serve's start) returns it instead of hanging for ever.
func TestStuckOpenStepIsAFault(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readOnly bool
		fresh    bool       // no store yet in /data
		op       errorfs.Op // the call held, on path
		path     string     //
		space    bool       // the free-space query is held instead
		want     string     // the fault names the call
	}{
		{name: "mkdir data dir", op: errorfs.OpMkdirAll, path: "/data", want: "making or finding the store dir /data/store"},
		{name: "stat store dir", op: errorfs.OpStat, path: "/data/store", want: "making or finding the store dir /data/store"},
		{name: "stat partial checkpoint", fresh: true, op: errorfs.OpStat, path: "/data/store.partial", want: "making or finding the store dir /data/store"},
		{name: "lock", op: errorfs.OpLock, path: "/data/store/LOCK", want: "taking the LOCK file of /data/store"},
		{name: "list scratch", op: errorfs.OpList, path: "/data/scratch", want: "emptying the scratch dir /data/scratch"},
		{name: "remove staged checkpoints", op: errorfs.OpRemoveAll, path: "/data/store/checkpoint-staging", want: "removing the staged checkpoints /data/store/checkpoint-staging"},
		{name: "create scratch", op: errorfs.OpMkdirAll, path: "/data/scratch", want: "emptying the scratch dir /data/scratch"},
		{name: "free space", space: true, want: "the free-space query of the volume holding /data"},
		{name: "read-only stat store dir", readOnly: true, op: errorfs.OpStat, path: "/data/store", want: "a stat of the store dir /data/store"},
		{name: "read-only lock", readOnly: true, op: errorfs.OpLock, path: "/data/store/LOCK", want: "taking the LOCK file of /data/store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const bound = 300 * time.Millisecond
			mem := vfs.NewMem()
			if !tc.fresh {
				buildFaultStore(t, mem)
			}
			held, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hold := func() {
				once.Do(func() { close(held) })
				<-release
			}
			opts := testOptions(errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if !tc.space && op == tc.op && path == tc.path {
					hold()
				}
				return nil
			})))
			opts.ReadOnly, opts.MaxWriteStall = tc.readOnly, bound
			if tc.space {
				opts.Space = func(string) (diskspace.Space, error) {
					hold()
					return diskspace.Space{Free: 1 << 40, Total: 1 << 41}, nil
				}
			}
			done := make(chan error, 1)
			go func() { done <- Use("/data", opts, func(*Store) error { return nil }) }()
			select {
			case <-held:
			case err := <-done:
				close(release)
				t.Fatalf("the open returned %v without the held call", err)
			}
			select {
			case err := <-done:
				close(release)
				var fatal *FatalError
				if err == nil || !errors.As(err, &fatal) || !strings.Contains(err.Error(), tc.want+" has not returned for over") {
					t.Fatalf("the open with its call held: %v; want the read-stall fault naming %q", err, tc.want)
				}
				t.Logf("fault: %v", err)
			case <-time.After(30 * time.Second):
				close(release)
				t.Fatalf("the open still blocked 30 s in, held in its own call (MaxWriteStall %v)", bound)
			}
		})
	}
}

// TestStuckOpenStepBound: on the fake clock, one of Open's own calls that
// never returns is a read-stall fault once it has lasted the bound, at
// most one tick of the read timer later, named as Open named it; one that
// returns just under the bound is none.
func TestStuckOpenStepBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = time.Minute
		h := newReadHold()
		defer h.unhold()
		g, fs := guardedTable(t, quietLogger, bound, func(fs vfs.FS) vfs.FS { return callHold{fs, h, "Stat"} })
		r := fs.(*readFS)
		step := func() <-chan error {
			done := make(chan error, 1)
			go func() {
				done <- r.timeStep("taking the LOCK file of /data/store", func() error {
					_, err := r.FS.Stat("/000007.sst") // not counted as a stat of the store: the step only
					return err
				})
			}()
			return done
		}

		done := checkStallBound(t, g, h, bound, "step", step)
		if err := g.fault.Load(); err == nil || !strings.Contains(err.Error(), "archive: taking the LOCK file of /data/store has not returned for over 1m") {
			t.Fatalf("fault %v, want the stuck step named", err)
		}
		h.unhold()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
