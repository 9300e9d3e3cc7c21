package oracle

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/oracle/world"
)

func TestConfigValidation(t *testing.T) {
	bad := []struct {
		name string
		cfg  Config
		want string
	}{
		{"listen", Config{Listen: "nope"}, "listen"},
		{"listen port", Config{Listen: "127.0.0.1:70000"}, "listen"},
		{"listen host", Config{Listen: "example.com:1"}, "listen"},
		{"accounts", Config{Accounts: -1}, "accounts"},
		{"records", Config{RecordsMean: -5}, "records"},
		{"hosts", Config{Hosts: -1}, "hosts"},
		{"hosts>accounts", Config{Accounts: 2, Hosts: 3}, "hosts"},
		{"seed", Config{Seed: -1}, "seed"},
		{"rate", Config{Rate: -1}, "rate"},
		{"events", Config{Events: -1}, "events"},
		{"traffic", Config{Traffic: "wild"}, "traffic"},
		{"faults", Config{Faults: "evil"}, "faults"},
		{"preload", Config{PreloadEvents: -1}, "preload-events"},
		{"preload without traffic", Config{Traffic: TrafficNone, PreloadEvents: 5}, "preload-events"},
		{"preload over retention", Config{Retention: 5, PreloadEvents: 6}, "preload-events"},
		{"retention", Config{Retention: -1}, "retention"},
	}
	for _, b := range bad {
		err := b.cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), b.want+"=") {
			t.Errorf("%s: %v, want ErrInvalidConfig naming %s", b.name, err, b.want)
		}
		if _, err := Start(context.Background(), b.cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Start: %v", b.name, err)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	d := Config{}.withDefaults()
	if d.Listen != "127.0.0.1:0" || d.Accounts != 1000 || d.RecordsMean != 20 || d.Hosts != 4 || d.Seed != 1 ||
		d.Rate != 50 || d.Events != 0 || d.Traffic != "full" || d.Faults != "none" {
		t.Fatalf("defaults %+v", d)
	}
}

// Traffic is paced at Rate (token pacing) and stops after Events; the status
// endpoint reports it.
func TestTrafficPacingAndDone(t *testing.T) {
	n := startNet(t, Config{Accounts: 50, RecordsMean: 5, Hosts: 2, Seed: 9, Rate: 200, Events: 100})
	t0 := time.Now()
	for !n.Status().Done {
		if time.Since(t0) > 5*time.Second {
			t.Fatalf("traffic not done: %+v", n.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(t0)
	if d < 400*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("100 events at 200/s took %v", d)
	}
	if st := n.Status(); st.Events != 100 || st.Seq != 100 {
		t.Fatalf("status %+v", st)
	}
	if err := n.TrafficErr(); err != nil {
		t.Fatal(err)
	}
	evs, err := n.Events()
	if err != nil || len(evs) != 100 {
		t.Fatalf("Events: %d %v", len(evs), err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.DID == "" || e.Type() == "" {
			t.Fatalf("event %d: seq %d did %q type %q", i, e.Seq, e.DID, e.Type())
		}
	}
}

// Preloaded events are in the history before the listeners open.
func TestPreloadBeforeListen(t *testing.T) {
	n := startNet(t, Config{Accounts: 40, RecordsMean: 5, Hosts: 2, Seed: 4, Rate: 1, Events: 1, PreloadEvents: 300})
	c := dialFirehose(t, n, "0")
	if got := c.seqs(300); got[0] != 1 || got[299] != 300 {
		t.Fatalf("preload seqs %d..%d", got[0], got[299])
	}
}

// Close stops traffic, listeners, handlers and subscribers, and Emit fails after.
func TestCloseStopsEverything(t *testing.T) {
	n, err := Start(context.Background(), Config{Accounts: 30, RecordsMean: 4, Hosts: 2, Seed: 2, Rate: 500})
	if err != nil {
		t.Fatal(err)
	}
	c := dialFirehose(t, n, "0")
	c.seqs(5)
	urls := append([]string{n.RelayURL()}, n.HostURLs()...)
	done := make(chan struct{})
	go func() { n.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close hung")
	}
	if !n.Status().Done {
		t.Fatal("traffic still running after Close")
	}
	for {
		if _, err := c.next(2 * time.Second); err != nil {
			break
		}
	}
	for _, u := range urls {
		if resp, err := http.Get(u + "/xrpc/_health"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s still serving after Close", u)
		}
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return world.Event{}, nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Emit after Close: %v", err)
	}
	n.Close() // idempotent
}

// Run prints the relay URL first and serves until ctx is done.
func TestRunPrintsRelayURL(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, Config{Accounts: 20, RecordsMean: 3, Hosts: 2}, pw); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	var st Status
	if getJSON(t, url+"/_devnet/status", &st); st.Accounts != 20 {
		t.Fatalf("status %+v", st)
	}
	go io.Copy(io.Discard, pr)
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "/_devnet/status"); err == nil {
		t.Fatal("still serving after Run returned")
	}
}

// Folding the firehose (cursor 0) onto getRepo snapshots taken before any
// event gives exactly the world's current records for every account.
func TestFoldFirehoseFromSnapshotMatchesWorld(t *testing.T) {
	n := startNet(t, quietCfg(40))
	ctx := context.Background()
	state := map[string]map[string]cid.Cid{}
	for _, a := range n.World().Accounts() {
		state[a.DID] = map[string]cid.Cid{}
		if !a.Active {
			continue
		}
		_, b, _ := getRepo(t, n.RelayURL(), a.DID)
		_, recs := loadCAR(t, b)
		state[a.DID] = recs
	}
	// Inactive-at-snapshot accounts' repos are read from the world directly.
	for _, a := range n.World().Accounts() {
		if !a.Active && a.Status != world.StatusDeleted {
			state[a.DID] = n.World().Records(a.DID)
		}
	}
	const k = 400
	emitTraffic(t, n, n.World().NewTraffic("basic", 21), k)

	c := dialFirehose(t, n, "0")
	for i := 0; i < k; i++ {
		f, err := c.next(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch f.t {
		case "#commit":
			cm, err := f.commit()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := repo.VerifyCommitMessage(ctx, cm); err != nil {
				t.Fatalf("seq %d: %v", cm.Seq, err)
			}
			for _, op := range cm.Ops {
				switch op.Action {
				case "create", "update":
					state[cm.Repo][op.Path] = cid.Cid(*op.Cid)
				case "delete":
					delete(state[cm.Repo], op.Path)
				}
			}
		case "#account":
			m, _ := atdataMap(f.body)
			if s, _ := m["status"].(string); s == world.StatusDeleted {
				state[m["did"].(string)] = map[string]cid.Cid{}
			}
		case "#sync":
			t.Fatal("basic traffic emitted #sync")
		}
	}
	for did, recs := range state {
		want := n.World().Records(did)
		if len(want) != len(recs) {
			t.Fatalf("%s: fold %d records, world %d", did, len(recs), len(want))
		}
		for p, v := range want {
			if recs[p] != v {
				t.Fatalf("%s %s: fold %s, world %s", did, p, recs[p], v)
			}
		}
	}
	// The emitted-event accessor agrees with what the subscriber read.
	evs, err := n.Events()
	if err != nil || len(evs) != k {
		t.Fatalf("Events: %d, %v", len(evs), err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.Type() == "" {
			t.Fatalf("Events()[%d]: seq %d type %q", i, e.Seq, e.Type())
		}
	}
}
