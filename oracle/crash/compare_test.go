package crash_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/backstream/backstream/oracle/crash"
)

// TestCompareHeld: the D1 check over what a subscriber held fails on a
// missing cursor, a changed body and a gap inside the followed range, and
// passes on a superset with more events after the held range.
func TestCompareHeld(t *testing.T) {
	held := map[uint64]string{3: "a", 4: "b", 6: "c"}
	cases := []struct {
		name  string
		after map[uint64]string
		want  string // "" = no error
	}{
		{"same", map[uint64]string{3: "a", 4: "b", 6: "c"}, ""},
		{"more before and after", map[uint64]string{1: "x", 2: "y", 3: "a", 4: "b", 6: "c", 7: "d"}, ""},
		{"missing", map[uint64]string{3: "a", 6: "c"}, "cursor 4 was handed to a subscriber and is gone"},
		{"changed", map[uint64]string{3: "a", 4: "B", 6: "c"}, "cursor 4 changed"},
		{"gap", map[uint64]string{3: "a", 4: "b", 5: "e", 6: "c"}, "never got 5"},
	}
	for _, c := range cases {
		err := crash.CompareHeld(held, c.after)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestDrawChainDeterministic: a seed always draws the same kill schedule
// (what -crash.seed=N replays), and the last kill lands in steady state.
func TestDrawChainDeterministic(t *testing.T) {
	a, b := drawChain(5, longShape), drawChain(5, longShape)
	if len(a) != longShape.kills {
		t.Fatalf("%d kills, want %d", len(a), longShape.kills)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("kill %d differs between two draws of seed 5: %+v vs %+v", i, a[i], b[i])
		}
	}
	if a[len(a)-1].kind != crash.KillInSteady {
		t.Fatalf("last kill %+v is not in steady state", a[len(a)-1])
	}
	if c := drawChain(6, longShape); c[0] == a[0] && c[1] == a[1] && c[2] == a[2] {
		t.Fatal("seeds 5 and 6 draw the same schedule")
	}
}

// TestCompareHeldCompacted: a held message missing from a later read is
// accepted only when a row below the compaction watermark, in either read,
// supersedes it (here an update of the same record); a missing message
// with nothing superseding it, or superseded only at the watermark, is
// still a D1 failure.
func TestCompareHeldCompacted(t *testing.T) {
	commit := func(cursor int, op, rkey string) string {
		return fmt.Sprintf(`{"did":"did:plc:a","time_us":1,"cursor":%d,"kind":"commit","commit":{"rev":"r","operation":%q,"collection":"app.bsky.feed.post","rkey":%q,"cid":"c%d"}}`,
			cursor, op, rkey, cursor)
	}
	held := map[uint64]string{3: commit(3, "create", "x"), 4: commit(4, "create", "y"), 5: commit(5, "update", "x")}
	after := map[uint64]string{4: held[4], 5: held[5]}
	if err := crash.CompareHeldCompacted(held, after, 6); err != nil {
		t.Fatalf("a create superseded below the watermark: %v", err)
	}
	if err := crash.CompareHeldCompacted(held, after, 5); err == nil || !strings.Contains(err.Error(), "cursor 3") {
		t.Fatalf("superseded only at the watermark: %v, want cursor 3 gone", err)
	}
	if err := crash.CompareHeldCompacted(held, map[uint64]string{3: held[3], 5: held[5]}, 6); err == nil || !strings.Contains(err.Error(), "cursor 4") {
		t.Fatalf("a live record gone: %v, want cursor 4 gone", err)
	}
	if err := crash.CompareHeldCompacted(held, map[uint64]string{4: held[4], 5: commit(5, "update", "z")}, 6); err == nil || !strings.Contains(err.Error(), "cursor 5 changed") {
		t.Fatalf("a kept message changed: %v", err)
	}
}
