package firehose

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/world"
)

// upstreamSeqs are the relay seqs of rows, in archive order.
func upstreamSeqs(rows []archive.Event) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.UpstreamSeq
	}
	return out
}

// TestLateFrameArchivedOnce: a relay delivering out of order sends seq 3
// after seq 4. The late frame was never accepted (4 skipped it), so it is
// no duplicate: its row is archived, cursor/relay stays at 4, and a
// seq_regression gap covering it is recorded in its unit, so the repair
// pass audits what its late effect may have put out of order. A second
// delivery of it, and a replay of seq 2, are true duplicates: dropped and
// counted, never archived twice.
func TestLateFrameArchivedOnce(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	s := openStore(t)
	w := newWriter(t, s, false)
	c, m := newConsumer(t, Config{Writer: w, Mode: ModeLive, GapIDs: gapIDsFrom(t, 1)})
	ctx := context.Background()
	handle := handler(t, c)
	f1 := encode(t, must(t)(wd.SetHandle(dids[0], "one.test")), 1)
	f2 := encode(t, must(t)(wd.SetHandle(dids[0], "two.test")), 2)
	f4 := encode(t, must(t)(wd.SetHandle(dids[0], "four.test")), 4)
	f3 := encode(t, must(t)(wd.SetStatus(dids[1], "deactivated")), 3)
	f5 := encode(t, must(t)(wd.SetHandle(dids[0], "five.test")), 5)
	handle(f1)
	handle(f2)
	handle(f4)
	handle(f3) // late: never seen
	// Every unit before this one is applied when it is.
	if _, err := w.Apply(ctx, &archive.Unit{}); err != nil {
		t.Fatal(err)
	}
	if got := relayCursor(t, s); got != 4 {
		t.Fatalf("cursor/relay %d after the late seq 3, want 4 (a late frame never moves it back)", got)
	}
	handle(f3) // seen: a duplicate
	handle(f2) // a replay
	handle(f5)
	waitDurable(t, c, 5)
	rows := readLog(t, s, false)
	if got := upstreamSeqs(rows); !slices.Equal(got, []int64{1, 2, 4, 3, 5}) {
		t.Fatalf("rows of relay seqs %v, want [1 2 4 3 5]: the late frame once, the duplicates dropped", got)
	}
	if rows[3].Kind != archive.KindAccount || rows[3].DID != dids[1] {
		t.Fatalf("late row %+v, want the #account of %s", rows[3], dids[1])
	}
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].Kind != archive.GapSeqRegression || gs[0].FromSeq != 4 || gs[0].ToSeq != 3 || !gs[0].Open() {
		t.Fatalf("gaps %+v, want one open seq_regression from 4 to 3", gs)
	}
	if got := relayCursor(t, s); got != 5 {
		t.Fatalf("cursor/relay %d, want 5", got)
	}
	if n := counter(m.anomalies, AnomalyDuplicate); n != 2 {
		t.Fatalf("anomalies{duplicate} = %d, want 2", n)
	}
	if n := counter(m.anomalies, AnomalyLate); n != 1 {
		t.Fatalf("anomalies{late} = %d, want 1", n)
	}
}

// TestRewoundRelayNewEventsArchived: a relay restored from a backup
// rewinds its sequence by 50, less than the gap threshold, without a
// restart notice, and sends 50 new events under seqs already accepted.
// They are not the frames accepted under those seqs, so they are no
// duplicates: the first of them starts the relay's new sequence (a
// seq_regression gap, cursor/relay following it) and every new event is
// archived. A replay of one of them afterwards is still a duplicate.
func TestRewoundRelayNewEventsArchived(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	s := openStore(t)
	w := newWriter(t, s, false)
	c, m := newConsumer(t, Config{Writer: w, Mode: ModeLive, GapIDs: gapIDsFrom(t, 1)})
	handle := handler(t, c)
	for seq := int64(1); seq <= 100; seq++ {
		handle(encode(t, must(t)(wd.SetHandle(dids[0], fmt.Sprintf("old%d.test", seq))), seq))
	}
	var replay []byte
	for seq := int64(51); seq <= 110; seq++ { // the restored relay's new events
		b := encode(t, must(t)(wd.SetHandle(dids[1], fmt.Sprintf("new%d.test", seq))), seq)
		handle(b)
		if seq == 60 {
			replay = b
		}
	}
	handle(replay)
	waitFor(t, 10*time.Second, "durable seq 110", func() bool { return c.LastDurable() == 110 })
	rows := readLog(t, s, false)
	var newRows int
	for _, r := range rows {
		if r.DID == dids[1] {
			newRows++
		}
	}
	if len(rows) != 160 || newRows != 60 {
		t.Fatalf("%d rows, %d of them the restored relay's, want 160 and 60 (its 50 events under old seqs lost as duplicates: %d dropped)",
			len(rows), newRows, counter(m.anomalies, AnomalyDuplicate))
	}
	wantFollowed(t, s, m, 110, "the replay of 60")
}

// TestRewoundRelayAfterRestart: the relay went back in its sequence while
// backstream was down, and sends new events under seqs below the cursor
// it resumes from, with no restart notice. This process accepted none of
// them, so no window tells them apart; but a commit whose rev is newer
// than the account's archived one is no duplicate: the relay went back
// in its sequence, and the consumer follows it at once (a seq_regression
// gap, cursor/relay going with it), so the new events after it are
// archived whatever their type. A replayed commit the archive holds is
// still a duplicate.
func TestRewoundRelayAfterRestart(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	post := func(i int) world.Event { return newPost(t, wd, dids[i%len(dids)], fmt.Sprint(i)) }
	s := openStore(t)
	w := newWriter(t, s, false)
	ctx := context.Background()
	c1, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, Store: s})
	var old [][]byte
	for seq := int64(1); seq <= 100; seq++ {
		b := encode(t, post(int(seq)), seq)
		old = append(old, b)
		if err := c1.Handle(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	c, m, before := restartAt100(t, c1, w, s)
	handle := handler(t, c)
	handle(old[39]) // a replay of seq 40
	for seq := int64(51); seq <= 60; seq++ {
		handle(encode(t, post(int(seq)), seq)) // the restored relay's new commits
	}
	handle(encode(t, post(101), 101))
	waitDurable(t, c, 101)
	rows := readLog(t, s, false)
	var got []int64
	for _, r := range rows[before:] {
		got = append(got, r.UpstreamSeq)
	}
	if want := []int64{51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 101}; !slices.Equal(got, want) {
		t.Fatalf("rows after the restart of relay seqs %v, want %v (duplicates dropped: %d)", got, want, counter(m.anomalies, AnomalyDuplicate))
	}
	wantFollowed(t, s, m, 101, "the replay of 40")
}

// TestLateFrameBehind: Behind follows the upstream time of what the
// archive holds. A late frame stamped before the last accepted event (a
// relay delivering out of order) leaves it; one stamped after it (a relay
// gone back in its sequence sends its new events under seqs below the
// position) brings it forward: the archive holds the relay's stream up
// to that event, and /readyz and the repair pass's wait read Behind.
func TestLateFrameBehind(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	s := openStore(t)
	w := newWriter(t, s, false)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, GapIDs: gapIDsFrom(t, 1), Now: func() time.Time { return now }})
	ctx := context.Background()
	handle := func(i int, seq int64, ago time.Duration) {
		t.Helper()
		ev := must(t)(wd.SetHandle(dids[i], fmt.Sprintf("h%d.test", seq)))
		ev.Identity.Time = now.Add(-ago).Format(time.RFC3339Nano)
		if err := c.Handle(ctx, encode(t, ev, seq)); err != nil {
			t.Fatal(err)
		}
	}
	handle(0, 1, 10*time.Minute)
	handle(0, 2, 10*time.Minute)
	handle(0, 5, 10*time.Minute)
	if b := c.Behind(); b != 10*time.Minute {
		t.Fatalf("Behind %s after seq 5, want 10m", b)
	}
	handle(1, 3, time.Hour) // late, older
	if b := c.Behind(); b != 10*time.Minute {
		t.Fatalf("Behind %s after a late frame an hour old, want 10m (unchanged)", b)
	}
	handle(2, 4, time.Minute) // late, newer
	if b := c.Behind(); b != time.Minute {
		t.Fatalf("Behind %s after a late frame a minute old, want 1m", b)
	}
	// Every unit before this one is applied when it is (the late ones
	// move no cursor to wait for).
	if _, err := w.Apply(ctx, &archive.Unit{}); err != nil {
		t.Fatal(err)
	}
	if got := upstreamSeqs(readLog(t, s, false)); !slices.Equal(got, []int64{1, 2, 5, 3, 4}) {
		t.Fatalf("rows of relay seqs %v, want [1 2 5 3 4]", got)
	}
}

// TestRewoundRelayAccountAfterRestart: after a restart from cursor 100,
// the relay that went back in its sequence sends a new commit under 51,
// then a takedown (#account) under 52 and a handle change (#identity)
// under 53: no rev tells those two from a replay, but the commit before
// them showed the relay's new sequence, which the consumer follows, so
// they are archived (before, they were dropped as duplicates).
func TestRewoundRelayAccountAfterRestart(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	post := func(did string) world.Event { return newPost(t, wd, did, "x") }
	s := openStore(t)
	w := newWriter(t, s, false)
	ctx := context.Background()
	c1, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, Store: s})
	for seq := int64(1); seq <= 100; seq++ {
		if err := c1.Handle(ctx, encode(t, post(dids[int(seq)%len(dids)]), seq)); err != nil {
			t.Fatal(err)
		}
	}
	c, m, before := restartAt100(t, c1, w, s)
	for _, f := range []struct {
		seq int64
		ev  world.Event
	}{
		{51, post(dids[0])},
		{52, must(t)(wd.SetStatus(dids[1], "takendown"))},
		{53, must(t)(wd.SetHandle(dids[2], "new.test"))},
		{101, post(dids[0])},
	} {
		if err := c.Handle(ctx, encode(t, f.ev, f.seq)); err != nil {
			t.Fatal(err)
		}
	}
	waitDurable(t, c, 101)
	var got []int64
	for _, r := range readLog(t, s, false)[before:] {
		got = append(got, r.UpstreamSeq)
	}
	if want := []int64{51, 52, 53, 101}; !slices.Equal(got, want) {
		t.Fatalf("rows after the restart of relay seqs %v, want %v (duplicates dropped: %d)", got, want, counter(m.anomalies, AnomalyDuplicate))
	}
}

// TestReplayBelowCursorNotFollowed: after a restart from cursor 100, a
// relay replays from 90 (more than it was asked). Frame 95 was a commit
// that brought no rows (no op survived), its account's last: the archive's
// rev for it never moved, so its rev looks newer than the archive's. It is
// no evidence of a relay gone back in its sequence: archived alone as late
// (nothing to archive), the position stays, and the replayed frames after
// it, an #identity among them, are duplicates, never archived twice.
func TestReplayBelowCursorNotFollowed(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	post := func(did string) world.Event { return newPost(t, wd, did, "x") }
	s := openStore(t)
	w := newWriter(t, s, false)
	ctx := context.Background()
	c1, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, Store: s})
	var sent [][]byte
	for seq := int64(1); seq <= 100; seq++ {
		var ev world.Event
		switch {
		case seq == 92:
			ev = post(dids[2])
		case seq == 95:
			ev = post(dids[2])
			ev.Commit.Ops = nil // no row: dids[2]'s rev/ stays at its commit of 92
		case seq == 96:
			ev = must(t)(wd.SetHandle(dids[1], "replayed.test"))
		default:
			ev = post(dids[int(seq)%2])
		}
		b := encode(t, ev, seq)
		sent = append(sent, b)
		if err := c1.Handle(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	c, m, before := restartAt100(t, c1, w, s)
	for seq := int64(90); seq <= 100; seq++ {
		if err := c.Handle(ctx, sent[seq-1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Handle(ctx, encode(t, post(dids[0]), 101)); err != nil {
		t.Fatal(err)
	}
	waitDurable(t, c, 101)
	var got []int64
	for _, r := range readLog(t, s, false)[before:] {
		got = append(got, r.UpstreamSeq)
	}
	if want := []int64{101}; !slices.Equal(got, want) {
		t.Fatalf("rows after the restart of relay seqs %v, want %v: the replay archived again (duplicates dropped: %d)", got, want, counter(m.anomalies, AnomalyDuplicate))
	}
}

// TestLateBelowWindowKeepsWindow: a late commit below the window of
// accepted frames (its rev newer than the archive's, but no row, so not
// followed as the relay's new sequence) takes no slot of the window: its
// slot belongs to a frame accepted within it, and a replay of that frame
// afterwards is still a duplicate, not a late frame processed again.
func TestLateBelowWindowKeepsWindow(t *testing.T) {
	wd := buildWorld(t, 3)
	dids := activeDIDs(wd)
	post := func(i int) world.Event { return newPost(t, wd, dids[i%len(dids)], fmt.Sprint(i)) }
	s := openStore(t)
	w := newWriter(t, s, false)
	ctx := context.Background()
	// A window of 4 frames: after seq 10, seqs 7 to 10.
	c, m := newConsumer(t, Config{Writer: w, Mode: ModeLive, Store: s, GapThreshold: 4, GapIDs: gapIDsFrom(t, 1)})
	handle := handler(t, c)
	var f10 []byte
	for seq := int64(1); seq <= 10; seq++ {
		b := encode(t, post(int(seq)), seq)
		handle(b)
		if seq == 10 {
			f10 = b
		}
	}
	waitDurable(t, c, 10)
	// A commit newer than the archive but bringing no row (an op-less
	// commit) is late below the window, not followed; seq 2's slot is
	// seq 10's.
	late := post(2)
	late.Commit.Ops = nil
	handle(encode(t, late, 2))
	if _, err := w.Apply(ctx, &archive.Unit{}); err != nil {
		t.Fatal(err)
	}
	handle(f10) // a replay of seq 10: in the window, accepted
	handle(encode(t, post(11), 11))
	waitDurable(t, c, 11)
	if got, want := upstreamSeqs(readLog(t, s, false)), []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Fatalf("rows of relay seqs %v, want %v (the replay of seq 10 a duplicate; late %d, duplicate %d)",
			got, want, counter(m.anomalies, AnomalyLate), counter(m.anomalies, AnomalyDuplicate))
	}
	if late, dup := counter(m.anomalies, AnomalyLate), counter(m.anomalies, AnomalyDuplicate); late != 1 || dup != 1 {
		t.Fatalf("anomalies{late} = %d, {duplicate} = %d, want 1 and 1 (the replay of seq 10 a duplicate); gaps %+v", late, dup, gapsOf(t, s))
	}
}

// newPost makes did write a post of the given text in the world.
func newPost(t testing.TB, wd *world.World, did, text string) world.Event {
	t.Helper()
	return must(t)(wd.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{
		"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"}))
}

// handler returns a function that hands one encoded frame to c, failing
// the test on an error.
func handler(t testing.TB, c *Consumer) func([]byte) {
	return func(b []byte) {
		t.Helper()
		if err := c.Handle(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
}

// wantFollowed checks that the consumer followed the relay gone back from
// seq 100 to 51: one seq_regression gap between them, cursor/relay at
// cursor, and one frame dropped as a duplicate (dup says which).
func wantFollowed(t *testing.T, s *archive.Store, m *Metrics, cursor int64, dup string) {
	t.Helper()
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].Kind != archive.GapSeqRegression || gs[0].FromSeq != 100 || gs[0].ToSeq != 51 {
		t.Fatalf("gaps %+v, want one seq_regression from 100 to 51", gs)
	}
	if got := relayCursor(t, s); got != cursor {
		t.Fatalf("cursor/relay %d, want %d", got, cursor)
	}
	if n := counter(m.anomalies, AnomalyDuplicate); n != 1 {
		t.Fatalf("anomalies{duplicate} = %d, want 1 (%s)", n, dup)
	}
}

// restartAt100 is a restart after first has accepted seqs up to 100: once
// they are durable, a live consumer from cursor 100 over the same store,
// its gap ids read as a restart reads them, and how many rows the log held
// before it.
func restartAt100(t *testing.T, first *Consumer, w *archive.Writer, s *archive.Store) (*Consumer, *Metrics, int) {
	t.Helper()
	waitDurable(t, first, 100)
	before := len(readLog(t, s, false))
	start := int64(100)
	c, m := newConsumer(t, Config{Writer: w, Mode: ModeLive, Store: s, Cursor: &start, GapIDs: gapIDsFrom(t, 1)})
	return c, m, before
}
