package oracle

import (
	"context"
	"errors"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/gorilla/websocket"
)

// Seqs start at 1 and increase by one; cursor=0 replays everything retained.
func TestCursorZeroReplaysFromSeqOne(t *testing.T) {
	n := startNet(t, quietCfg(20))
	tr := n.World().NewTraffic("basic", 3)
	emitTraffic(t, n, tr, 10)
	c := dialFirehose(t, n, "0")
	if got := c.seqs(10); !reflect.DeepEqual(got, seqRange(1, 10)) {
		t.Fatalf("cursor=0 seqs %v, want 1..10", got)
	}
	c.expectQuiet(100 * time.Millisecond)
}

// cursor=N replays seq > N, then continues live.
func TestCursorReplaysAfterNThenLive(t *testing.T) {
	n := startNet(t, quietCfg(20))
	tr := n.World().NewTraffic("basic", 3)
	emitTraffic(t, n, tr, 10)
	c := dialFirehose(t, n, "4")
	if got := c.seqs(6); !reflect.DeepEqual(got, seqRange(5, 10)) {
		t.Fatalf("cursor=4 replay %v, want 5..10", got)
	}
	emitTraffic(t, n, tr, 3)
	if got := c.seqs(3); !reflect.DeepEqual(got, seqRange(11, 13)) {
		t.Fatalf("live after replay %v, want 11..13", got)
	}
	// cursor == head: nothing to replay, live only.
	c2 := dialFirehose(t, n, "13")
	emitTraffic(t, n, tr, 1)
	if got := c2.seqs(1); got[0] != 14 {
		t.Fatalf("cursor=head got %v, want [14]", got)
	}
}

// No cursor starts at the live tip.
func TestNoCursorStartsAtLiveTip(t *testing.T) {
	n := startNet(t, quietCfg(20))
	tr := n.World().NewTraffic("basic", 3)
	emitTraffic(t, n, tr, 5)
	c := dialFirehose(t, n, "")
	emitTraffic(t, n, tr, 2)
	if got := c.seqs(2); !reflect.DeepEqual(got, []int64{6, 7}) {
		t.Fatalf("no-cursor seqs %v, want [6 7]", got)
	}
	c.expectQuiet(100 * time.Millisecond)
}

// cursor=0 with trimmed history replays from the oldest retained, without #info.
func TestCursorZeroWithRetentionReplaysOldestRetained(t *testing.T) {
	cfg := quietCfg(20)
	cfg.Retention = 5
	n := startNet(t, cfg)
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 10)
	c := dialFirehose(t, n, "0")
	if got := c.seqs(5); !reflect.DeepEqual(got, seqRange(6, 10)) {
		t.Fatalf("cursor=0 seqs %v, want 6..10", got)
	}
}

// A cursor older than the retained history gets #info OutdatedCursor, then
// everything retained; a cursor exactly at the trim point does not.
func TestCursorOutdatedGetsInfoThenRetained(t *testing.T) {
	cfg := quietCfg(20)
	cfg.Retention = 5
	n := startNet(t, cfg)
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 10) // retained 6..10

	c := dialFirehose(t, n, "2")
	f, err := c.next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.op != 1 || f.t != "#info" {
		t.Fatalf("first frame op=%d t=%q, want #info", f.op, f.t)
	}
	var info struct{ Name string }
	if m, err := parseInfo(f); err != nil || m != infoOutdatedCursor {
		t.Fatalf("info name %q (%v), want OutdatedCursor", m, err)
	}
	_ = info
	if got := c.seqs(5); !reflect.DeepEqual(got, seqRange(6, 10)) {
		t.Fatalf("after OutdatedCursor seqs %v, want 6..10", got)
	}

	c2 := dialFirehose(t, n, "5") // seqs > 5 are all retained
	f, err = c2.next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.t == "#info" {
		t.Fatalf("cursor=5 (nothing missed) got #info")
	}
	if s, _ := f.seq(); s != 6 {
		t.Fatalf("cursor=5 first seq %d, want 6", s)
	}
}

func parseInfo(f wireFrame) (string, error) {
	m, err := atdataMap(f.body)
	if err != nil {
		return "", err
	}
	s, _ := m["name"].(string)
	return s, nil
}

// A cursor above the head gets a FutureCursor error frame and the connection closes.
func TestCursorFutureErrorFrameThenClose(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 3)
	c := dialFirehose(t, n, "4")
	f, err := c.next(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.op != -1 || f.t != "" {
		t.Fatalf("frame op=%d t=%q, want error frame op=-1", f.op, f.t)
	}
	if name, err := f.errorName(); err != nil || name != errFutureCursor {
		t.Fatalf("error %q (%v), want FutureCursor", name, err)
	}
	_, err = c.next(5 * time.Second)
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("after FutureCursor: %v, want close 1008", err)
	}
	if got := n.FirehoseConnections(); got != 0 {
		t.Fatalf("FutureCursor counted as a served connection: %d", got)
	}
}

// A non-integer cursor is refused before the upgrade.
func TestCursorInvalidIsBadRequest(t *testing.T) {
	n := startNet(t, quietCfg(5))
	for _, c := range []string{"abc", "-1", "1.5"} {
		var e xrpcError
		if st := getJSON(t, n.RelayURL()+"/xrpc/com.atproto.sync.subscribeRepos?cursor="+c, &e); st != 400 || e.Error != "InvalidRequest" {
			t.Fatalf("cursor %q: %d %q, want 400 InvalidRequest", c, st, e.Error)
		}
	}
}

// A subscriber that replays while traffic runs sees every seq exactly once:
// it is registered for live events before its replay.
func TestReplayToLiveNoGapNoDuplicate(t *testing.T) {
	cfg := Config{Accounts: 50, RecordsMean: 5, Hosts: 2, Seed: 11, Rate: 2000, PreloadEvents: 3000}
	n := startNet(t, cfg)
	c := dialFirehose(t, n, "0")
	// Reading nothing for a while keeps the server mid-replay (its socket
	// buffers fill) while live events keep arriving.
	for deadline := time.Now().Add(20 * time.Second); n.Status().Seq < 3300; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d events", n.Status().Seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := c.seqs(4000)
	for i := range got {
		if got[i] != int64(i+1) {
			t.Fatalf("seq %d at position %d, want %d", got[i], i, i+1)
		}
	}
}

// A subscriber more than SubscriberBuffer live events behind gets
// ConsumerTooSlow and is closed.
func TestConsumerTooSlow(t *testing.T) {
	cfg := quietCfg(20)
	cfg.SubscriberBuffer = 20
	n := startNet(t, cfg)
	n.testSendBuffer.Store(4096)
	tr := n.World().NewTraffic("basic", 3)
	smallRead := func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}
	before := n.stats.connections.Load()
	c := dialRaw(t, n, "", smallRead)
	for n.stats.connections.Load() == before {
		time.Sleep(time.Millisecond)
	}
	emitTraffic(t, n, tr, 400) // the client reads nothing meanwhile
	var last wireFrame
	frames := 0
	for {
		f, err := c.next(5 * time.Second)
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("after %d frames: %v, want close 1008", frames, err)
			}
			break
		}
		last = f
		frames++
	}
	if name, _ := last.errorName(); last.op != -1 || name != errConsumerTooSlow {
		t.Fatalf("last frame op=%d error=%q, want ConsumerTooSlow", last.op, name)
	}
	if frames >= 400 {
		t.Fatalf("slow consumer got all %d frames", frames)
	}
	t.Logf("slow consumer got %d frames before ConsumerTooSlow", frames-1)
}

// Every #commit a subscriber reads decodes and passes indigo's sync 1.1
// check and signature verification against the served DID document; every
// #sync verifies too.
func TestFirehoseCommitsVerify(t *testing.T) {
	cfg := Config{Accounts: 60, RecordsMean: 10, Hosts: 3, Seed: 5, Rate: 5000, Events: 1000}
	n := startNet(t, cfg)
	c := dialFirehose(t, n, "0")
	dir := directory(n)
	ctx := context.Background()
	counts := map[string]int{}
	for i := 0; i < 1000; i++ {
		f, err := c.next(10 * time.Second)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		counts[f.t]++
		switch f.t {
		case "#commit":
			cm, err := f.commit()
			if err != nil {
				t.Fatalf("decode #commit: %v", err)
			}
			if _, err := repo.VerifyCommitMessage(ctx, cm); err != nil {
				t.Fatalf("seq %d %s: VerifyCommitMessage: %v", cm.Seq, cm.Repo, err)
			}
			if err := repo.VerifyCommitSignature(ctx, dir, cm); err != nil {
				t.Fatalf("seq %d %s: signature: %v", cm.Seq, cm.Repo, err)
			}
		case "#sync":
			sm, err := f.sync()
			if err != nil {
				t.Fatalf("decode #sync: %v", err)
			}
			if _, err := repo.VerifySyncMessage(ctx, dir, sm); err != nil {
				t.Fatalf("seq %d %s: VerifySyncMessage: %v", sm.Seq, sm.Did, err)
			}
		}
	}
	if counts["#commit"] == 0 {
		t.Fatalf("no #commit in %v", counts)
	}
	t.Logf("frame types: %v", counts)
}
