package backfill

import "testing"

// TestCheckPathSequence: one checker validates a walk's keys in order and
// validates a collection again only when it changes, so a run of keys
// whose collection repeats an invalid one, or an empty one, is still
// refused, and a valid collection after an invalid one is accepted.
func TestCheckPathSequence(t *testing.T) {
	rc := newRecordChecker(false)
	for _, c := range []struct {
		key  string
		want DropReason
	}{
		{"/a", DropInvalidCollection},
		{"app.bsky.feed.like/a", 0},
		{"app.bsky.feed.like/b", 0},
		{"app.bsky.feed.like/bad rkey", DropInvalidRKey},
		{"app.bsky.feed.like/c", 0},
		{"app.bsky.feed.like./a", DropInvalidCollection},
		{"app.bsky.feed.like./b", DropInvalidCollection},
		{"app.bsky.feed.post/a", 0},
		{"/b", DropInvalidCollection},
		{"app.bsky..post/a", DropInvalidCollection},
		{"app.bsky..post/b", DropInvalidCollection},
		{"app.bsky.feed.post/b", 0},
	} {
		if _, got := rc.checkPath([]byte(c.key)); got != c.want {
			t.Errorf("%q: %v, want %v", c.key, got, c.want)
		}
	}
}
