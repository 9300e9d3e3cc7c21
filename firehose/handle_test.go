package firehose

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// kindScript is one frame of every kind, from a real world, with what it
// must become.
type scripted struct {
	ev   world.Event
	want []archive.Event // rows without Seq/TimeUS
}

func everyKind(t *testing.T, w *world.World) []scripted {
	t.Helper()
	dids := activeDIDs(w)
	a, b := dids[0], dids[1]
	var out []scripted
	add := func(ev world.Event, want ...archive.Event) { out = append(out, scripted{ev, want}) }

	create := must(t)(w.CreateRecord(a, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "hello", "createdAt": "2024-01-01T00:00:00Z"}))
	op := create.Commit.Ops[0]
	coll, rkey, _ := bytes.Cut([]byte(op.Path), []byte("/"))
	rec, _ := w.RecordBytes(a, op.Path)
	add(create, archive.Event{Kind: archive.KindCreate, DID: a, Collection: string(coll), RKey: string(rkey),
		Rev: create.Commit.Rev, CID: cid.Cid(*op.Cid).Bytes(), Record: rec})

	update := must(t)(w.UpdateRecord(a, op.Path, map[string]any{"$type": "app.bsky.feed.post", "text": "edited", "createdAt": "2024-01-01T00:00:00Z"}))
	rec2, _ := w.RecordBytes(a, op.Path)
	add(update, archive.Event{Kind: archive.KindUpdate, DID: a, Collection: string(coll), RKey: string(rkey),
		Rev: update.Commit.Rev, CID: cid.Cid(*update.Commit.Ops[0].Cid).Bytes(), Record: rec2})

	del := must(t)(w.DeleteRecord(a, op.Path))
	add(del, archive.Event{Kind: archive.KindDelete, DID: a, Collection: string(coll), RKey: string(rkey), Rev: del.Commit.Rev})

	add(must(t)(w.SetHandle(b, "renamed.test")), archive.Event{Kind: archive.KindIdentity, DID: b, Handle: "renamed.test"})
	add(must(t)(w.SetStatus(b, world.StatusDeactivated)), archive.Event{Kind: archive.KindAccount, DID: b, Status: "deactivated"})
	add(must(t)(w.SetStatus(b, world.StatusActive)), archive.Event{Kind: archive.KindAccount, DID: b, Active: true})
	sync := must(t)(w.ResetRepo(a, 3))
	add(sync, archive.Event{Kind: archive.KindSync, DID: a, Rev: sync.Sync.Rev})
	for i := range out {
		for j := range out[i].want {
			out[i].want[j].UpstreamSeq = int64(i + 1)
			out[i].want[j].Source = archive.SourceLive
		}
	}
	return out
}

func sameRow(got, want archive.Event) bool {
	got.Seq, got.TimeUS = 0, 0
	return got.Kind == want.Kind && got.DID == want.DID && got.Collection == want.Collection &&
		got.RKey == want.RKey && got.Rev == want.Rev && bytes.Equal(got.CID, want.CID) &&
		bytes.Equal(got.Record, want.Record) && got.Handle == want.Handle && got.Active == want.Active &&
		got.Status == want.Status && got.UpstreamSeq == want.UpstreamSeq && got.Source == want.Source
}

// TestHandleEveryKind: each frame kind becomes the right rows, in both
// modes (a #sync a row in cap/ only, for the merge walk), and every frame
// moves cursor/relay to its seq.
func TestHandleEveryKind(t *testing.T) {
	for _, capture := range []bool{true, false} {
		name := "live"
		if capture {
			name = "capture"
		}
		t.Run(name, func(t *testing.T) {
			w := buildWorld(t, 4)
			script := everyKind(t, w)
			s := openStore(t)
			wr := newWriter(t, s, capture)
			mode := ModeLive
			if capture {
				mode = ModeCapture
			}
			c, m := newConsumer(t, Config{Writer: wr, Mode: mode})
			ctx := context.Background()
			var want []archive.Event
			for i, sc := range script {
				seq := int64(i + 1)
				if err := c.Handle(ctx, encode(t, sc.ev, seq)); err != nil {
					t.Fatalf("handle %d: %v", seq, err)
				}
				if c.LastAccepted() != seq {
					t.Fatalf("last accepted %d, want %d", c.LastAccepted(), seq)
				}
				waitDurable(t, c, seq)
				if got := relayCursor(t, s); got != seq {
					t.Fatalf("cursor/relay %d after frame %d", got, seq)
				}
				for _, r := range sc.want {
					if r.Kind == archive.KindSync && !capture {
						continue // a live #sync moves the ratchet, no row: its replacement opens with one
					}
					want = append(want, r)
				}
			}
			got := readLog(t, s, capture)
			if other := readLog(t, s, !capture); len(other) != 0 {
				t.Fatalf("%d rows in the other log", len(other))
			}
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
			}
			for i := range want {
				if !sameRow(got[i], want[i]) {
					t.Errorf("row %d\n got  %+v\n want %+v", i, got[i], want[i])
				}
			}
			for _, typ := range []string{frameCommit, frameIdentity, frameAccount, frameSync} {
				if counter(m.frames, typ) == 0 {
					t.Errorf("frames_total{type=%s} = 0", typ)
				}
			}
			for _, r := range dropReasons {
				if n := counter(m.dropped, r); n != 0 {
					t.Errorf("dropped{%s} = %d on valid frames", r, n)
				}
			}
			select {
			case <-c.Started():
			default:
				t.Fatal("Started not closed after the first durable cursor")
			}
		})
	}
}

// TestUnitCarriesCursor: each processed frame is exactly one submitted
// unit holding its rows and cursor/relay = its seq (C1); capture units carry
// no repo mutations, live #account/#sync units do.
func TestUnitCarriesCursor(t *testing.T) {
	for _, mode := range []Mode{ModeCapture, ModeLive} {
		w := buildWorld(t, 4)
		script := everyKind(t, w)
		s := openStore(t)
		c, _ := newConsumer(t, Config{Writer: newWriter(t, s, mode == ModeCapture), Mode: mode})
		var units []*archive.Unit
		real := c.submit
		c.submit = func(ctx context.Context, u *archive.Unit) error {
			units = append(units, u)
			return real(ctx, u)
		}
		for i, sc := range script {
			seq := int64(i + 1)
			if err := c.Handle(context.Background(), encode(t, sc.ev, seq)); err != nil {
				t.Fatal(err)
			}
			if len(units) != i+1 {
				t.Fatalf("%s seq %d: %d units submitted for %d frames", mode, seq, len(units), i+1)
			}
			u := units[i]
			if len(u.Puts) != 0 || !bytes.Equal(u.Cursor.Key, archive.KeyCursorRelay) || u.Cursor.Seq != uint64(seq) {
				t.Fatalf("%s seq %d: puts %+v, cursor %s=%d, want only cursor/relay=%d", mode, seq, u.Puts, u.Cursor.Key, u.Cursor.Seq, seq)
			}
			if len(u.Events) != len(sc.want) {
				t.Fatalf("%s seq %d: %d rows with the cursor, want %d", mode, seq, len(u.Events), len(sc.want))
			}
			if u.Acks == nil || u.Token != seq {
				t.Fatalf("%s seq %d: unit without receipt (token %v)", mode, seq, u.Token)
			}
			effects := sc.ev.Account != nil || sc.ev.Sync != nil
			if got := len(u.Repos) > 0; got != (effects && mode == ModeLive) {
				t.Fatalf("%s seq %d (%s): repo updates %+v", mode, seq, sc.ev.Type(), u.Repos)
			}
		}
		waitDurable(t, c, int64(len(script)))
	}
}

// TestHandleValidation: invalid rev / DID / blocks drop the whole event,
// invalid collection / rkey / block drop one op, an oversized record drops
// its row; every such frame still advances the cursor, alone in its unit
// when nothing is left (S1).
func TestHandleValidation(t *testing.T) {
	w := buildWorld(t, 4)
	a := activeDIDs(w)[0]
	fresh := func() *comatproto.SyncSubscribeRepos_Commit {
		return must(t)(w.CreateRecord(a, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "x", "createdAt": "2024-01-01T00:00:00Z"})).Commit
	}
	// withOp adds a copy of the commit's op under another path.
	withOp := func(c *comatproto.SyncSubscribeRepos_Commit, path string) *comatproto.SyncSubscribeRepos_Commit {
		op := *c.Ops[0]
		op.Path = path
		c.Ops = append(c.Ops, &op)
		return c
	}
	type tc struct {
		name  string
		ev    world.Event
		rows  int
		drops map[string]int
	}
	var cases []tc
	{
		c := fresh()
		c.Rev = "not-a-tid"
		cases = append(cases, tc{"invalid rev drops the event", world.Event{Commit: withOp(c, "app.bsky.feed.like/3kaaaaaaaaaaa")}, 0, map[string]int{DropInvalidRev: 1}})
	}
	{
		c := fresh()
		c.Repo = "did:bad"
		cases = append(cases, tc{"invalid DID drops the event", world.Event{Commit: c}, 0, map[string]int{DropInvalidDID: 1}})
	}
	cases = append(cases, tc{"invalid collection drops one op", world.Event{Commit: withOp(fresh(), "not_an.nsid!/3kaaaaaaaaaaa")}, 1, map[string]int{DropInvalidCollection: 1}})
	cases = append(cases, tc{"invalid rkey drops one op", world.Event{Commit: withOp(fresh(), "app.bsky.feed.like/bad key")}, 1, map[string]int{DropInvalidRKey: 1}})
	{
		c := fresh()
		c.Ops[0].Path = "bad/path/shape"
		c = withOp(c, "bad..nsid/x")
		cases = append(cases, tc{"all ops invalid: cursor only", world.Event{Commit: c}, 0, map[string]int{DropInvalidRKey: 1, DropInvalidCollection: 1}})
	}
	{
		c := withOp(fresh(), "app.bsky.feed.like/3kbbbbbbbbbbb")
		other := must(t)(w.CreateRecord(a, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "y", "createdAt": "2024-01-01T00:00:00Z"}))
		c.Ops[1].Cid = other.Commit.Ops[0].Cid // a block not in this commit
		cases = append(cases, tc{"missing block drops one op", world.Event{Commit: c}, 1, map[string]int{DropMissingBlock: 1}})
	}
	{
		// A block of its own in the commit's CAR, hash-checked, holding an
		// array: no record, whatever its CID says.
		c := fresh()
		bad := []byte{0x82, 0x01, 0x02}
		sum, _ := mh.Sum(bad, mh.SHA2_256, -1)
		link := lexutil.LexLink(cid.NewCidV1(cid.DagCBOR, sum))
		section := append(cid.Cid(link).Bytes(), bad...)
		c.Blocks = append(binary.AppendUvarint(c.Blocks, uint64(len(section))), section...)
		c = withOp(c, "app.bsky.feed.like/3kddddddddddd")
		c.Ops[1].Cid = &link
		cases = append(cases, tc{"a record block that is no DAG-CBOR map drops one op", world.Event{Commit: c}, 1, map[string]int{DropBadRecord: 1}})
	}
	{
		c := withOp(fresh(), "app.bsky.feed.like/3kccccccccccc")
		c.Ops[1].Action = "upsert"
		cases = append(cases, tc{"invalid action drops one op", world.Event{Commit: c}, 1, map[string]int{DropInvalidAction: 1}})
	}
	{
		c := fresh()
		c.Blocks = c.Blocks[:len(c.Blocks)/2]
		cases = append(cases, tc{"bad blocks drop the commit", world.Event{Commit: c}, 0, map[string]int{DropBadBlocks: 1}})
	}
	{
		c := fresh()
		c.Commit = lexutil.LexLink(cid.Cid(*c.Ops[0].Cid)) // root mismatch
		cases = append(cases, tc{"root mismatch drops the commit", world.Event{Commit: c}, 0, map[string]int{DropBadBlocks: 1}})
	}
	{
		sy := must(t)(w.ResetRepo(a, 1)).Sync
		sy.Rev = "3lzzzzzzzzzzzz" // 14 chars
		cases = append(cases, tc{"sync with an invalid rev", world.Event{Sync: sy}, 0, map[string]int{DropInvalidRev: 1}})
	}
	{
		long := make([]byte, 300)
		for i := range long {
			long[i] = 'a'
		}
		h := string(long)
		cases = append(cases, tc{"identity with an oversized handle: kept, as handle.invalid (TestIdentityHandleTooLong)", world.Event{Identity: &comatproto.SyncSubscribeRepos_Identity{Did: a, Handle: &h, Time: "2024-01-01T00:00:00Z"}}, 1, nil})
		st := "deactivated"
		cases = append(cases, tc{"account with an invalid DID", world.Event{Account: &comatproto.SyncSubscribeRepos_Account{Did: "nope", Status: &st, Time: "2024-01-01T00:00:00Z"}}, 0, map[string]int{DropInvalidDID: 1}})
	}

	s := openStore(t)
	wr := newWriter(t, s, true)
	c, m := newConsumer(t, Config{Writer: wr, Mode: ModeCapture})
	rows := 0
	for i, tc := range cases {
		seq := int64(i + 1)
		before := map[string]int{}
		for _, r := range dropReasons {
			before[r] = counter(m.dropped, r)
		}
		if err := c.Handle(context.Background(), encode(t, tc.ev, seq)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		waitDurable(t, c, seq)
		if got := relayCursor(t, s); got != seq {
			t.Fatalf("%s: cursor/relay %d, want %d", tc.name, got, seq)
		}
		rows += tc.rows
		if got := len(readLog(t, s, true)); got != rows {
			t.Fatalf("%s: %d rows in total, want %d", tc.name, got, rows)
		}
		for _, r := range dropReasons {
			if d := counter(m.dropped, r) - before[r]; d != tc.drops[r] {
				t.Errorf("%s: dropped{%s} += %d, want %d", tc.name, r, d, tc.drops[r])
			}
		}
	}
}

// TestHandleSkips: frames without a seq, undecodable and unknown frames,
// duplicates and invalid seqs advance nothing and submit nothing; a seq gap
// is counted and processed.
func TestHandleSkips(t *testing.T) {
	w := buildWorld(t, 4)
	a := activeDIDs(w)[0]
	ident := func(h string) world.Event { return must(t)(w.SetHandle(a, h)) }
	s := openStore(t)
	c, m := newConsumer(t, Config{Writer: newWriter(t, s, false), Mode: ModeLive})
	ctx := context.Background()
	step := func(data []byte, wantAccepted int64) {
		t.Helper()
		if err := c.Handle(ctx, data); err != nil {
			t.Fatal(err)
		}
		if c.LastAccepted() != wantAccepted {
			t.Fatalf("last accepted %d, want %d", c.LastAccepted(), wantAccepted)
		}
	}
	step(errorFrame(t, "FutureCursor", "ahead"), 0) // no position yet: nothing to reset (TestFutureCursorResets)
	one := encode(t, ident("one.test"), 5)
	step(one, 5)
	step(errorFrame(t, "ConsumerTooSlow", "slow"), 5)
	step(errorFrame(t, "Whatever", ""), 5)
	step(infoFrame(t, "SomethingElse"), 5)
	if c.OutdatedCursor() || testutilGauge(m) != 0 {
		t.Fatal("outdated cursor raised by another #info")
	}
	step(infoFrame(t, "OutdatedCursor"), 5)
	if !c.OutdatedCursor() || testutilGauge(m) != 1 {
		t.Fatal("OutdatedCursor did not raise the alert gauge")
	}
	step([]byte{0xff, 0x00, 0x13}, 5)
	step(unknownFrame, 5)
	step(one, 5)                               // duplicate of the last
	step(encode(t, ident("older.test"), 3), 5) // below the last
	step(encode(t, ident("zero.test"), 0), 5)  // invalid seq
	step(encode(t, ident("next.test"), 6), 6)  // in order
	step(encode(t, ident("gap.test"), 9), 9)   // gap: processed
	waitDurable(t, c, 9)
	rows := readLog(t, s, false)
	var seqs []int64
	for _, r := range rows {
		seqs = append(seqs, r.UpstreamSeq)
	}
	if len(seqs) != 3 || seqs[0] != 5 || seqs[1] != 6 || seqs[2] != 9 {
		t.Fatalf("archived upstream seqs %v, want [5 6 9]", seqs)
	}
	if rows[1].Handle != "next.test" {
		t.Fatalf("row for seq 6: %+v", rows[1])
	}
	want := map[string]int{AnomalyFutureCursor: 1, AnomalyConsumerTooSlow: 1, AnomalyErrorFrame: 1,
		AnomalyOutdatedCursor: 1, AnomalyUndecodable: 1, AnomalyUnknownType: 1, AnomalyDuplicate: 2,
		AnomalyInvalidSeq: 1, AnomalySeqGap: 1}
	for _, k := range anomalyKinds {
		if got := counter(m.anomalies, k); got != want[k] {
			t.Errorf("anomalies{%s} = %d, want %d", k, got, want[k])
		}
	}
	for typ, n := range map[string]int{frameError: 3, frameInfo: 2, frameInvalid: 1, frameUnknown: 1, frameIdentity: 6} {
		if got := counter(m.frames, typ); got != n {
			t.Errorf("frames{%s} = %d, want %d", typ, got, n)
		}
	}
	if got := relayCursor(t, s); got != 9 {
		t.Fatalf("cursor/relay %d, want 9", got)
	}
}

func testutilGauge(m *Metrics) int { return int(gaugeValue(m.outdated)) }

// TestErrorFrameLogClipped: a relay's #error frame carries text of its
// choosing; the log line keeps at most 64 bytes of its name and 256 of its
// message, cut on a rune boundary (valid UTF-8, whatever the relay sent)
// and marked as cut.
func TestErrorFrameLogClipped(t *testing.T) {
	s := openStore(t)
	c, _ := newConsumer(t, Config{Writer: newWriter(t, s, false), Mode: ModeLive})
	logs := &recordLog{}
	c.log = slog.New(logs)
	// "a" then 2-byte runes: byte 64 and byte 256 fall inside a rune.
	name := "a" + strings.Repeat("é", 100)
	message := "a" + strings.Repeat("é", 1000)
	if err := c.Handle(context.Background(), errorFrame(t, name, message)); err != nil {
		t.Fatal(err)
	}
	if len(logs.recs) != 1 {
		t.Fatalf("%d log lines for one error frame, want 1", len(logs.recs))
	}
	for key, bound := range map[string]int{"error": 64, "message": 256} {
		var got string
		logs.recs[0].Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				got = a.Value.String()
			}
			return true
		})
		kept, _, cut := strings.Cut(got, "… (")
		if !utf8.ValidString(got) || !cut || len(kept) > bound || len(kept) < bound-1 {
			t.Errorf("%s logged as %q (%d bytes kept, valid UTF-8 %v), want at most %d bytes of valid UTF-8 marked as cut",
				key, got, len(kept), utf8.ValidString(got), bound)
		}
	}
}

// recordLog keeps the records logged through it.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// TestRepeatedRelayFramesLogBounded: a relay may repeat an error frame, an
// #info OutdatedCursor or a seq skip on every frame of a connection. Each
// is counted, and gaps recorded; the log has at most one line a minute per
// kind, saying how many occurrences it stands for.
func TestRepeatedRelayFramesLogBounded(t *testing.T) {
	w := buildWorld(t, 4)
	a := activeDIDs(w)[0]
	s := openStore(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, _ := newConsumer(t, Config{Writer: newWriter(t, s, false), Mode: ModeLive, Now: func() time.Time { return now }})
	logs := &recordLog{}
	c.log = slog.New(logs)
	ctx := context.Background()
	const n = 200
	seq := int64(1)
	for i := range n {
		for _, f := range [][]byte{infoFrame(t, "OutdatedCursor"), errorFrame(t, "ConsumerTooSlow", "x")} {
			if err := c.Handle(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		ev := must(t)(w.SetHandle(a, fmt.Sprintf("h%d.test", i)))
		if err := c.Handle(ctx, encode(t, ev, seq)); err != nil {
			t.Fatal(err)
		}
		seq += DefaultGapThreshold + 2 // every frame a recorded seq skip
	}
	waitDurable(t, c, seq-DefaultGapThreshold-2)
	lines := map[string]int{}
	for _, r := range logs.recs {
		lines[r.Message]++
	}
	for _, msg := range []string{
		"firehose: relay sent an error frame",
		"firehose: relay says our cursor is outdated: events were missed",
		"firehose: gap in the relay's stream recorded; its repair pass will fetch what changed",
	} {
		if lines[msg] != 1 {
			t.Errorf("%d lines %q for %d frames within a minute, want 1", lines[msg], msg, n)
		}
	}
	if got := counter(c.m.anomalies, AnomalyOutdatedCursor); got != n {
		t.Errorf("outdated_cursor counted %d times, want %d", got, n)
	}
	gaps := 0
	for _, k := range []string{"outdated_cursor", "seq_skip"} {
		gaps += counter(c.m.gaps, k)
	}
	if gaps != n {
		t.Errorf("%d gaps recorded, want %d (one per outdated cursor, the seq skips with them)", gaps, n)
	}
}

// TestAccountStatusCut: an #account whose status is longer than the
// archive keeps (an unknown word from the relay) is archived with its
// status cut to upstream.MaxAccountStatus bytes, without splitting a
// character, as a listed status is: the account's activity reaches the
// repo state and every subscriber (Jetstream v1 sends the event too),
// where refusing the row would lose both.
func TestAccountStatusCut(t *testing.T) {
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	ascii := strings.Repeat("s", 100)
	wide := strings.Repeat("x", upstream.MaxAccountStatus-1) + "é" + "tail" // é spans bytes 63 and 64
	for _, c := range []struct{ status, want string }{
		{ascii, ascii[:upstream.MaxAccountStatus]},
		{wide, wide[:upstream.MaxAccountStatus-1]},
		{"takendown", "takendown"},
	} {
		st := c.status
		f := &upstream.Frame{Account: &comatproto.SyncSubscribeRepos_Account{Did: did, Active: false, Status: &st, Time: "2024-01-01T00:00:00Z"}}
		rows := Rows(f, 7, nil)
		if len(rows) != 1 {
			t.Fatalf("an #account with a status of %d bytes gave %d rows, want 1 (inactive, its status cut)", len(c.status), len(rows))
		}
		if ev := rows[0]; ev.Kind != archive.KindAccount || ev.Active || ev.Status != c.want || !utf8.ValidString(ev.Status) {
			t.Errorf("an #account with a status of %d bytes: row %+v, want inactive with status %q", len(c.status), ev, c.want)
		}
	}
}

// TestIdentityHandleTooLong: an #identity whose handle is longer than any
// handle can be (253 bytes, the archive's bound) is archived with the
// handle handle.invalid, the lexicon's word for a handle that does not
// validate, and counted: the event is kept, so every subscriber still
// learns that the account's identity changed (Jetstream v1 passes the
// relay's event through). A cut handle would name a handle the account
// never declared. A handle of exactly 253 bytes is kept as sent.
func TestIdentityHandleTooLong(t *testing.T) {
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	atLimit := strings.Repeat("a", 249) + ".com"
	for _, c := range []struct{ handle, want string }{
		{strings.Repeat("a", 300), ident.HandleInvalid},
		{atLimit + "x", ident.HandleInvalid},
		{atLimit, atLimit},
	} {
		h := c.handle
		f := &upstream.Frame{Identity: &comatproto.SyncSubscribeRepos_Identity{Did: did, Handle: &h, Time: "2024-01-01T00:00:00Z"}}
		rows := Rows(f, 7, m)
		if len(rows) != 1 {
			t.Fatalf("an #identity with a handle of %d bytes gave %d rows, want 1 (the event kept)", len(c.handle), len(rows))
		}
		if ev := rows[0]; ev.Kind != archive.KindIdentity || ev.DID != did || ev.Handle != c.want {
			t.Errorf("an #identity with a handle of %d bytes: row %+v, want handle %q", len(c.handle), ev, c.want)
		}
	}
	if got := promtest.Value(t, reg, "backstream_firehose_invalid_handles_total", nil); got != 2 {
		t.Errorf("backstream_firehose_invalid_handles_total = %v, want 2", got)
	}
	if got := promtest.Sum(t, reg, "backstream_firehose_dropped_total"); got != 0 {
		t.Errorf("backstream_firehose_dropped_total = %v, want 0 (no event dropped)", got)
	}
}
