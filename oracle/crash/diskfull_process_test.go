package crash_test

// TestDiskFullUnderLiveTraffic: the real binary on a small tmpfs, in steady
// state under live traffic with a websocket subscriber; a filler file takes
// the volume's free space but a little. The process must stop by itself —
// Pebble really hitting ENOSPC (--min-free off), or ingest reaching the
// free-space floor — within a bound, with "disk full at <data-dir>: free
// space and restart" in its log and /readyz seen 503 before it exited.
// Then the filler is deleted and a restart on the same data dir converges:
// the fold from cursor 0 equals the network's ground truth (what came
// before the disk filled and after), seqs strictly increase, and nothing
// the subscriber held is lost or changed (Harness.Finish).

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

func TestDiskFullUnderLiveTraffic(t *testing.T) {
	citest.NeedRoot(t) // it mounts a tmpfs
	for _, tc := range []struct {
		name string
		args []string
		// leave is the free space the filler leaves.
		leave uint64
		// within bounds the time from the fill to the exit.
		within time.Duration
	}{
		// No floor: the WAL or a flush hits ENOSPC; a stall ends at the
		// 3 s bound.
		{"enospc", []string{"--min-free", "off", "--max-write-stall", "3s"}, 256 << 10, 30 * time.Second},
		// The floor: crossed after ~256 KiB of ingest, seen within the
		// 5 s check period.
		{"floor", []string{"--min-free", "16MiB"}, 16<<20 + 256<<10, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { diskFullRun(t, tc.args, tc.leave, tc.within) })
	}
}

func diskFullRun(t *testing.T, args []string, leave uint64, within time.Duration) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 100, RecordsMean: 10, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 31})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	// A short capture wait and settle: the world is small and the
	// restart's convergence is checked exactly by Finish anyway.
	args = append(append(append([]string{}, serveArgs...), "--capture-wait", "1s"), args...)
	h := crash.New(t, net, crash.Options{Args: args, Subscribe: true, Settle: time.Second})
	citest.Tmpfs(t, h.DataDir, 128<<20, "") // the store, its preallocated logs (about 9 MiB each) and the floor case's 16 MiB

	p := h.Start()
	st := h.WaitPhase(p, crash.PhaseSteady, 90*time.Second)
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, 31, 300)
	defer h.StopTraffic()
	// Live events are archived before the disk fills.
	waitTip(t, p, st.Archive.TipSeq+200, 30*time.Second)

	filler := filepath.Join(h.DataDir, "filler")
	fill(t, filler, h.DataDir, leave)
	saw503, exitAfter := watchReadyz(t, p, within)
	err = p.Err()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Fatalf("serve ended by %v on a full disk, want a non-zero exit:\n%s", err, p.Tail())
	}
	want := "disk full at " + h.DataDir + ": free space and restart"
	logb, _ := os.ReadFile(p.Log)
	if !strings.Contains(string(logb), want) {
		t.Fatalf("the log lacks %q:\n%s", want, p.Tail())
	}
	if !saw503 {
		t.Fatalf("/readyz was never 503 before the process exited:\n%s", p.Tail())
	}
	errLines := strings.Count(string(logb), `"level":"ERROR"`)
	t.Logf("filled %v after the start; exit %d %v after the fill; /readyz 503 seen; %d ERROR lines in the run's log",
		time.Since(p.Start).Round(time.Millisecond), ee.ExitCode(), exitAfter.Round(time.Millisecond), errLines)
	for _, l := range strings.Split(string(logb), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			t.Logf("  %.400s", l)
		}
	}

	// Space freed: a restart on the same data dir loses nothing.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p2 := h.Start()
	waitTip(t, p2, 1, 60*time.Second)
	h.StopTraffic()
	res := h.Finish(h.WaitConverged(p2, 2*time.Minute))
	t.Logf("after the restart: %d events fold to ground truth for %d accounts; the subscriber held %d over %d connections",
		res.Events, res.Checked, res.SubHeld, res.SubConns)
}

// fill writes path until the volume holding dir has about leave bytes free.
func fill(t *testing.T, path, dir string, leave uint64) {
	t.Helper()
	sp, err := diskspace.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Free <= leave {
		t.Fatalf("only %d bytes free before the fill, want more than %d", sp.Free, leave)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n := sp.Free - leave; n > 0; {
		chunk := buf[:min(uint64(len(buf)), n)]
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
		n -= uint64(len(chunk))
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
}

// watchReadyz polls /readyz until p exits (failing after within) and
// reports whether it answered 503, and when p exited.
func watchReadyz(t *testing.T, p *crash.Proc, within time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	c := http.Client{Timeout: time.Second}
	saw503 := false
	for !p.Exited() {
		if time.Since(start) > within {
			t.Fatalf("serve still running %v after the disk filled:\n%s", within, p.Tail())
		}
		if resp, err := c.Get("http://" + p.Listen + "/readyz"); err == nil {
			saw503 = saw503 || resp.StatusCode == http.StatusServiceUnavailable
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return saw503, time.Since(start)
}

// waitTip polls p until its archive tip reaches tip.
func waitTip(t *testing.T, p *crash.Proc, tip uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if p.Exited() {
			t.Fatalf("serve exited before tip %d: %v\n%s", tip, p.Err(), p.Tail())
		}
		if st, ok := p.Status(); ok && st.Archive.TipSeq >= tip {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tip %d within %v:\n%s", tip, within, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
