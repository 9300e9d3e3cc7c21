package scenario

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/world"
)

// TestSyncOneRow: each upstream #sync in steady state reaches an
// includeSync subscriber as exactly one sync event — the replacement's
// opening row, at the snapshot's rev, before the rows that change the
// account — not also as a row of the #sync frame itself. Two resets of one
// account, each replaced before the next: two sync events in all.
func TestSyncOneRow(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, 30, 4, 2)
		active, _ := listedAccounts(n)
		victim := pick(planRand(seed, 11), active, 1)[0].DID
		fs := vfs.NewStrictMem()
		nd := startNode(t, n, fs, nodeOpts{Workers: 4})
		nd.waitFor(30*time.Second, "steady state", func() bool { return nd.Phase() == archive.PhaseSteadyState })
		// A #sync before the live consumer connects would be behind its
		// start (see TestSyncWakesRetry).
		nd.waitFor(10*time.Second, "the live consumer connected", func() bool { return n.FirehoseConnections() >= 2 })
		var revs []string
		for i := range 2 {
			em, err := n.Emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(victim, 2+i) })
			if err != nil {
				t.Fatal(err)
			}
			revs = append(revs, em.Sync.Rev)
			nd.waitFor(30*time.Second, fmt.Sprintf("reset %d replaced", i+1), func() bool {
				st, err := nd.store.RepoState(victim)
				c, cerr := nd.store.RelayCursor()
				return err == nil && cerr == nil && c >= uint64(em.Seq) &&
					st.Status == archive.StatusComplete && st.Refetch == archive.RefetchNone && st.BackfillRev == em.Sync.Rev
			})
		}
		tip, err := nd.store.Tip()
		if err != nil {
			t.Fatal(err)
		}
		syncs, after := nd.subscribedSyncs(t, victim, tip)
		if len(syncs) != len(revs) {
			t.Fatalf("%d sync events for %d upstream #syncs of %s: %v", len(syncs), len(revs), victim, syncs)
		}
		for i, s := range syncs {
			if s.rev != revs[i] {
				t.Errorf("sync event %d at rev %s, want the snapshot's %s", i, s.rev, revs[i])
			}
		}
		if after == 0 {
			t.Error("no commit event of the account follows its last sync event")
		}
		if err := nd.stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		verify(t, n, fs)
	})
}

// syncEvent is a sync event as a subscriber reads it.
type syncEvent struct {
	cursor uint64
	rev    string
}

// subscribedSyncs reads /subscribe?includeSync=true from cursor 0 through
// seq tip over a real websocket and returns did's sync events, and how many
// of did's commit events came after the last of them.
func (nd *node) subscribedSyncs(t *testing.T, did string, tip uint64) ([]syncEvent, int) {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws://"+nd.addr+"/subscribe?cursor=0&includeSync=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var (
		syncs []syncEvent
		after int
	)
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read (syncs so far %v): %v", syncs, err)
		}
		var ev struct {
			DID    string `json:"did"`
			Cursor uint64 `json:"cursor"`
			Kind   string `json:"kind"`
			Sync   struct {
				Rev string `json:"rev"`
			} `json:"sync"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		if ev.DID == did {
			switch ev.Kind {
			case "sync":
				syncs, after = append(syncs, syncEvent{ev.Cursor, ev.Sync.Rev}), 0
			case "commit":
				after++
			}
		}
		if ev.Cursor >= tip {
			return syncs, after
		}
	}
}
