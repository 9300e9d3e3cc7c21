package archive_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// op is one row of a rules case: kind, account (0: A, 1: B), record
// ("collection/rkey" shorthand: a post rkey unless it names a collection),
// account status.
type op struct {
	kind   archive.Kind
	acct   int
	rec    string
	status string
}

func (o op) event(dids []string, rev int) archive.Event {
	ev := archive.Event{Kind: o.kind, DID: dids[o.acct], Source: archive.SourceLive}
	switch o.kind {
	case archive.KindCreate, archive.KindUpdate, archive.KindDelete:
		ev.Collection, ev.RKey = "app.bsky.feed.post", o.rec
		if c, r, ok := cut(o.rec); ok {
			ev.Collection, ev.RKey = c, r
		}
		ev.Rev = fmt.Sprintf("3m%011d", rev)
		if o.kind != archive.KindDelete {
			ev.CID = []byte{1, 0x71, 0x12, 0x20, byte(rev)}
			ev.Record = []byte{0xa1, 0x61, 'n', 0x18, byte(rev)}
		}
	case archive.KindSync:
		// An archived sync row is a replacement's opening row: an
		// upstream #sync (live or merged) moves the ratchet and is not
		// archived.
		ev.Rev, ev.Source = fmt.Sprintf("3m%011d", rev), archive.SourceRetry
	case archive.KindAccount:
		ev.Status, ev.Active = o.status, o.status == ""
	case archive.KindIdentity:
		ev.Handle = "a.test"
	}
	return ev
}

// opUnits makes one unit per op, over dids (nil: two accounts), and
// returns the dids.
func opUnits(dids []string, ops []op) ([]string, [][]archive.Event) {
	if dids == nil {
		dids = []string{"did:plc:aaaa", "did:plc:bbbb"}
	}
	units := make([][]archive.Event, len(ops))
	for i, o := range ops {
		units[i] = []archive.Event{o.event(dids, i+1)}
	}
	return dids, units
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

var (
	cr  = func(rec string) op { return op{kind: archive.KindCreate, rec: rec} }
	up  = func(rec string) op { return op{kind: archive.KindUpdate, rec: rec} }
	del = func(rec string) op { return op{kind: archive.KindDelete, rec: rec} }
	syn = op{kind: archive.KindSync}
	acc = func(status string) op { return op{kind: archive.KindAccount, status: status} }
	ide = op{kind: archive.KindIdentity}
	onB = func(o op) op { o.acct = 1; return o }
)

// TestCompactRules: the supersession rules, one case each, with the rows a
// pass must remove written out by hand (indexes into ops). Every case also
// checks the reference recomputation (check.Survivors) agrees, and that the
// index left behind is exactly what the survivors need.
func TestCompactRules(t *testing.T) {
	cases := []struct {
		name    string
		dids    []string
		ops     []op
		passAt  int // rows written before the pass (0: all)
		removed []int
	}{
		{name: "an update supersedes the create", ops: []op{cr("r1"), up("r1")}, removed: []int{0}},
		{name: "a second update supersedes the first", ops: []op{cr("r1"), up("r1"), up("r1")}, removed: []int{0, 1}},
		{name: "a delete supersedes the create and update, and is kept", ops: []op{cr("r1"), up("r1"), del("r1")}, removed: []int{0, 1}},
		{name: "a re-create after a delete is kept", ops: []op{cr("r1"), del("r1"), cr("r1")}, removed: []int{0}},
		{name: "a re-create then an update", ops: []op{cr("r1"), del("r1"), cr("r1"), up("r1")}, removed: []int{0, 2}},
		{name: "a create over a current record is superseded with it", ops: []op{cr("r1"), cr("r1"), del("r1")}, removed: []int{0, 1}},
		{name: "creates over a current record, then an update", ops: []op{cr("r1"), up("r1"), cr("r1"), cr("r1"), up("r1")}, removed: []int{0, 1, 2, 3}},
		{name: "other records are untouched", ops: []op{cr("r1"), cr("r2"), del("r1"), up("r2")}, removed: []int{0, 1}},
		{name: "the same rkey in another collection is another record", ops: []op{cr("app.bsky.feed.post/r1"), cr("app.bsky.feed.like/r1"), cr("app.bsky.feed.postgate/r1"), del("app.bsky.feed.post/r1")}, removed: []int{0}},
		{name: "a sync supersedes nothing: its replacement's rows do", ops: []op{cr("r1"), cr("r2"), up("r2"), del("r3"), syn, up("r1"), cr("r4")}, removed: []int{0, 1}},
		{name: "an account deleted supersedes its records", ops: []op{cr("r1"), up("r1"), cr("r2"), acc("deleted")}, removed: []int{0, 1, 2}},
		{name: "an account taken down supersedes its records", ops: []op{cr("r1"), cr("r2"), acc("takendown"), cr("r3")}, removed: []int{0, 1}},
		{name: "deactivated keeps everything", ops: []op{cr("r1"), cr("r2"), acc("deactivated")}},
		{name: "suspended keeps everything", ops: []op{cr("r1"), cr("r2"), acc("suspended"), acc("")}},
		{name: "delete, account, identity and sync rows are never removed", ops: []op{cr("r1"), del("r1"), ide, acc("deleted"), syn, acc("takendown"), ide, syn, acc("deleted")}, removed: []int{0}},
		{name: "another account is unaffected", ops: []op{cr("r1"), onB(cr("r1")), onB(up("r2")), acc("deleted"), onB(acc("deactivated"))}, removed: []int{0}},
		{name: "a DID that prefixes another is another account", dids: []string{"did:plc:ab", "did:plc:abc"}, ops: []op{cr("r1"), onB(cr("r1")), acc("takendown"), onB(cr("r2")), syn}, removed: []int{0}},
		{name: "rows at or above the watermark supersede nothing yet", ops: []op{cr("r1"), cr("r2"), up("r1"), del("r2"), syn}, passAt: 2},
		{name: "a pass applies what is below it only", ops: []op{cr("r1"), up("r1"), cr("r2"), del("r2")}, passAt: 2, removed: []int{0}},
	}
	for _, tc := range cases {
		for _, each := range []bool{false, true} {
			name := tc.name
			if each {
				// A batch per unit: what a tombstone supersedes is in
				// Pebble, not in its own batch.
				name += " (unit by unit)"
			}
			t.Run(name, func(t *testing.T) { rulesCase(t, tc.dids, tc.ops, tc.passAt, tc.removed, each) })
		}
	}
}

func rulesCase(t *testing.T, dids []string, ops []op, passAt int, wantRemoved []int, each bool) {
	_, units := opUnits(dids, ops)
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	if passAt == 0 {
		passAt = len(units)
	}
	apply := applyUnits
	if each {
		apply = applyEach
	}
	rows := apply(t, w, units[:passAt])
	res := compact(t, s, w, archive.CompactOptions{})
	rows = append(rows, apply(t, w, units[passAt:])...)
	var removed []int
	got := storeRows(t, s)
	for i, ev := range rows {
		if _, ok := got[ev.Seq]; !ok {
			removed = append(removed, i)
		}
	}
	if !reflect.DeepEqual(removed, wantRemoved) {
		t.Fatalf("removed rows %v, want %v", removed, wantRemoved)
	}
	var bytes int64
	for _, i := range removed {
		v, err := archive.AppendEvent(nil, &rows[i])
		if err != nil {
			t.Fatal(err)
		}
		bytes += int64(len(v))
	}
	if res.Bytes != bytes {
		t.Fatalf("the pass counted %d bytes removed, the rows were %d", res.Bytes, bytes)
	}
	if res.Rows != len(wantRemoved) || res.To != rows[passAt-1].Seq+1 {
		t.Fatalf("result %+v: %d rows removed, watermark %d", res, len(wantRemoved), rows[passAt-1].Seq+1)
	}
	checkSurvivors(t, s, rows, res.To)
	// A second pass applies the rest; the reference agrees.
	res = compact(t, s, w, archive.CompactOptions{})
	checkSurvivors(t, s, rows, res.To)
}

// TestCompactMatchesRecomputation runs passes over random traffic, while
// the writer keeps writing, and compares the store after each round with
// the full recomputation from every row ever written: nothing that is not
// superseded is removed, everything superseded below the watermark is, and
// the index is exactly what the survivors need.
func TestCompactMatchesRecomputation(t *testing.T) {
	rounds, perRound := 6, 300
	if testing.Short() {
		rounds, perRound = 4, 200
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			defer w.Close()
			tr := churn.New(seed, 24)
			opts := archive.CompactOptions{Logger: quiet}
			if seed%2 == 0 {
				archive.SetCompactBatchBytes(&opts, 1) // every account its own batch
			}
			var rows []archive.Event
			var last archive.CompactResult
			for r := 0; r < rounds; r++ {
				units := tr.Units(perRound)
				var wg sync.WaitGroup
				var written []archive.Event
				wg.Add(1)
				go func() {
					defer wg.Done()
					written = applyUnits(t, w, units)
				}()
				res, err := s.Compact(context.Background(), w, opts)
				wg.Wait()
				if err != nil {
					t.Fatal(err)
				}
				if res.To < last.To || res.From != last.To {
					t.Fatalf("watermark went %d → %d after %d", res.From, res.To, last.To)
				}
				last = res
				rows = append(rows, written...)
				sort.Slice(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
				checkSurvivors(t, s, rows, res.To)
			}
			res := compact(t, s, w, opts)
			checkSurvivors(t, s, rows, res.To)
			if want := check.Survivors(rows, res.To); len(want) == len(rows) {
				t.Fatal("the traffic superseded nothing")
			}
			t.Logf("%d rows, %d survive", len(rows), len(storeRows(t, s)))
		})
	}
}
