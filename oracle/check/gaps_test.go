package check

import (
	"slices"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestVanished: a row missing from the later read is explained only when a
// row below the watermark, in either read, supersedes it; a row missing
// with nothing superseding it, or superseded only at or above the
// watermark, is reported.
func TestVanished(t *testing.T) {
	const did, other = "did:plc:a", "did:plc:b"
	rec := func(seq uint64, kind archive.Kind, d, rkey string) archive.Event {
		return archive.Event{Seq: seq, Kind: kind, DID: d, Collection: "app.bsky.feed.post", RKey: rkey}
	}
	acct := func(seq uint64, d, status string) archive.Event {
		return archive.Event{Seq: seq, Kind: archive.KindAccount, DID: d, Status: status}
	}
	before := []archive.Event{
		rec(1, archive.KindCreate, did, "x"), rec(2, archive.KindUpdate, did, "x"), rec(3, archive.KindCreate, did, "y"),
		rec(4, archive.KindCreate, other, "z"), acct(5, other, "takendown"), rec(6, archive.KindDelete, did, "x"),
		rec(7, archive.KindCreate, did, "w"), acct(8, did, "deactivated"),
	}
	cases := []struct {
		name  string
		after []uint64
		w     uint64
		want  []uint64
	}{
		{"nothing gone", []uint64{1, 2, 3, 4, 5, 6, 7, 8}, 9, nil},
		{"every superseded row gone", []uint64{3, 5, 6, 7, 8}, 9, nil},
		{"a live record gone", []uint64{5, 6, 7, 8}, 9, []uint64{3}},
		{"gone after deactivation (keeps)", []uint64{3, 5, 6, 8}, 9, []uint64{7}},
		{"superseded only at the watermark", []uint64{2, 3, 4, 5, 6, 7, 8}, 2, []uint64{1}},
		{"the superseding delete itself gone", []uint64{3, 5, 7, 8}, 9, []uint64{6}},
		{"the update gone with the create, its delete at w", []uint64{3, 4, 5, 6, 7, 8}, 6, []uint64{2}},
	}
	for _, c := range cases {
		var after []archive.Event
		for _, ev := range before {
			if slices.Contains(c.after, ev.Seq) {
				after = append(after, ev)
			}
		}
		if got := Vanished(before, after, c.w); !slices.Equal(got, c.want) {
			t.Errorf("%s: vanished %v, want %v", c.name, got, c.want)
		}
	}
}
