//go:build npmclients

package clients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

func TestMain(m *testing.M) { os.Exit(crash.Main(m)) }

// serveArgs: short retry settings, so replacements run within seconds.
var serveArgs = []string{"--backfill-workers", "8", "--capture-wait", "3s",
	"--retry-interval", "200ms", "--retry-max-delay", "1s", "--retry-scan-period", "300ms"}

// report is what clients.mjs writes.
type report struct {
	Atcute struct {
		TimedOut     bool           `json:"timedOut"`
		Events       int            `json:"events"`
		Errors       int            `json:"errors"`
		ErrorSamples []string       `json:"errorSamples"`
		Kinds        map[string]int `json:"kinds"`
		Fold         check.Fold     `json:"fold"`
	} `json:"atcute"`
	Skyware struct {
		TimedOut   bool            `json:"timedOut"`
		Events     int             `json:"events"`
		Unique     int             `json:"unique"`
		Duplicates int             `json:"duplicates"`
		Resent     int             `json:"resent"`
		DupSamples json.RawMessage `json:"dupSamples"`
		Starts     int             `json:"starts"`
		Fold       check.Fold      `json:"fold"`
	} `json:"skyware"`
}

// TestNPMClients: the network runs full traffic (resets, reactivations,
// account deletions) and, on top, resyncs of accounts whose repo changed
// in three records the archive never heard of; serve archives it all. Then
// @atcute/jetstream replays the whole archive with validation on and
// @skyware/jetstream replays it while being stopped and resumed from its
// own time_us cursor. Zero validation errors, zero duplicates (beyond the
// one event at the cursor itself that Jetstream's inclusive time cursor
// sends again on each resume), and both folds equal the network's records.
func TestNPMClients(t *testing.T) {
	dir := os.Getenv("BACKSTREAM_CLIENTS_DIR")
	if dir == "" {
		t.Fatal("BACKSTREAM_CLIENTS_DIR (node_modules with the clients) is not set: run scripts/test-clients.sh")
	}
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 200, RecordsMean: 20, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: serveArgs})
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 3*time.Minute)

	h.Traffic = crash.StartTraffic(net, world.TrafficFull, 16, 300)
	waitFor(t, 2*time.Minute, "3000 traffic events", func() bool { return h.Traffic.Events() >= 3000 })
	h.StopTraffic()
	resynced := resyncSome(t, net, 8)
	h.WaitConverged(p, 3*time.Minute)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}

	// The archive itself, as ground truth sees it; and what a v1 client
	// must receive: every row but the sync markers.
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	f, stats, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	if checked, bad := check.Compare(f, net.World(), nil); len(bad) > 0 {
		t.Fatalf("the archive differs from the network for %d of %d accounts:\n%s", len(bad), checked, check.Describe(bad, 10))
	}
	kinds, replaced := archiveCounts(t, s, resynced)
	s.Close()
	expect := stats.Events - kinds[archive.KindSync]
	t.Logf("archive: %d rows (%v); %d sync rows a v1 client does not get; resyncs of accounts that changed 3 records archived %v rows each",
		stats.Events, kinds, kinds[archive.KindSync], replaced)
	for did, n := range replaced {
		if n != 4 {
			t.Errorf("the resync of %s that changed 3 records archived %d rows, want 4 (its sync row and 3)", did, n)
		}
	}

	p = h.Start()
	h.WaitPhase(p, crash.PhaseSteady, time.Minute)
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command("node", filepath.Join(dir, "clients.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "URL=http://"+p.Listen, fmt.Sprint("EXPECT=", expect), "OUT="+out)
	b, err := cmd.CombinedOutput()
	t.Logf("clients.mjs:\n%s", b)
	if err != nil {
		t.Fatalf("clients.mjs: %v", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	a, k := &r.Atcute, &r.Skyware
	t.Logf("@atcute/jetstream: %d events of %d, %d validation errors %q, kinds %v", a.Events, expect, a.Errors, a.ErrorSamples, a.Kinds)
	t.Logf("@skyware/jetstream: %d distinct events of %d in %d starts, %d received, %d duplicates %s, %d resent at the inclusive time cursor",
		k.Unique, expect, k.Starts, k.Events, k.Duplicates, k.DupSamples, k.Resent)
	if a.TimedOut || a.Events+a.Errors != expect {
		t.Errorf("@atcute/jetstream read %d events and %d errors of %d (timed out %v)", a.Events, a.Errors, expect, a.TimedOut)
	}
	if a.Errors != 0 {
		t.Errorf("@atcute/jetstream: %d validation errors, e.g. %q", a.Errors, a.ErrorSamples)
	}
	if k.TimedOut || k.Unique != expect {
		t.Errorf("@skyware/jetstream read %d distinct events of %d (timed out %v)", k.Unique, expect, k.TimedOut)
	}
	if k.Duplicates != 0 || k.Resent > k.Starts-1 {
		t.Errorf("@skyware/jetstream resuming by time_us: %d duplicates, e.g. %s (and %d resent in %d resumes)", k.Duplicates, k.DupSamples, k.Resent, k.Starts-1)
	}
	for name, fold := range map[string]check.Fold{"@atcute/jetstream": a.Fold, "@skyware/jetstream": k.Fold} {
		if checked, bad := check.Compare(fold, net.World(), nil); len(bad) > 0 {
			t.Errorf("%s folds differently from the network for %d of %d accounts:\n%s", name, len(bad), checked, check.Describe(bad, 10))
		} else {
			t.Logf("%s: the fold equals the network's records for %d accounts", name, checked)
		}
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// resyncSome changes three records of n active accounts in the world
// without emitting the commits (the archive never hears of them), then
// emits a #sync of each: resets that changed three records. It returns the
// accounts.
func resyncSome(t *testing.T, net *oracle.Network, n int) []string {
	t.Helper()
	w := net.World()
	post := func(text string) map[string]any {
		return map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"}
	}
	var dids []string
	for _, a := range w.Accounts() {
		if len(dids) == n {
			break
		}
		if !a.Active || a.Records < 5 {
			continue
		}
		_, err := net.Emit(func(w *world.World) (world.Event, error) {
			var paths []string
			for p := range w.Records(a.DID) {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			if _, err := w.UpdateRecord(a.DID, paths[0], post("changed quietly")); err != nil {
				return world.Event{}, err
			}
			if _, err := w.DeleteRecord(a.DID, paths[1]); err != nil {
				return world.Event{}, err
			}
			if _, err := w.CreateRecord(a.DID, "app.bsky.feed.post", "", post("created quietly")); err != nil {
				return world.Event{}, err
			}
			return w.Resync(a.DID)
		})
		if err != nil {
			t.Fatalf("resync of %s: %v", a.DID, err)
		}
		dids = append(dids, a.DID)
	}
	if len(dids) < n {
		t.Fatalf("%d accounts to resync, want %d", len(dids), n)
	}
	return dids
}

// archiveCounts counts the archive's rows by kind and, for each resynced
// account, the rows of its last replacement (its retry-sourced sync row
// and the retry rows after it).
func archiveCounts(t *testing.T, s *archive.Store, resynced []string) (map[archive.Kind]int, map[string]int) {
	t.Helper()
	want := map[string]bool{}
	for _, d := range resynced {
		want[d] = true
	}
	kinds, replaced := map[archive.Kind]int{}, map[string]int{}
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		kinds[ev.Kind]++
		if !want[ev.DID] || ev.Source != archive.SourceRetry {
			continue
		}
		if ev.Kind == archive.KindSync {
			replaced[ev.DID] = 0
		}
		replaced[ev.DID]++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return kinds, replaced
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
