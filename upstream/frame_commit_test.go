package upstream

import (
	"bytes"
	"reflect"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	lexutil "github.com/bluesky-social/indigo/lex/util"
)

// commitBodies returns #commit bodies as cbor-gen writes them: the real
// sync-1.1 commit, and variants with null/absent optional fields, blobs,
// a null op, and an empty ops list.
func commitBodies(t testing.TB) [][]byte {
	fx := buildCommit(t)
	var out [][]byte
	add := func(c *comatproto.SyncSubscribeRepos_Commit) {
		var buf bytes.Buffer
		if err := c.MarshalCBOR(&buf); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	add(fx.evt)
	c := *fx.evt
	c.Since, c.PrevData, c.Blobs, c.Rebase, c.TooBig = nil, nil, []lexutil.LexLink{fx.evt.Commit, fx.evt.Commit}, true, true
	add(&c)
	c2 := *fx.evt
	c2.Ops = append([]*comatproto.SyncSubscribeRepos_RepoOp{nil}, fx.evt.Ops...)
	c2.Seq = -5
	add(&c2)
	c3 := *fx.evt
	c3.Ops, c3.Blocks = nil, nil
	add(&c3)
	return out
}

// TestCommitFastPathTaken: cbor-gen's own encodings, the shape producers
// send, go through the fast decoder (otherwise it is dead code and the
// benchmark numbers are cbor-gen's), and give cbor-gen's result.
func TestCommitFastPathTaken(t *testing.T) {
	for i, body := range commitBodies(t) {
		got, n, ok := decodeCommitFast(body)
		if !ok || n != len(body) {
			t.Fatalf("body %d: fast path not taken (ok %v, %d of %d bytes)", i, ok, n, len(body))
		}
		var want comatproto.SyncSubscribeRepos_Commit
		if err := want.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("body %d: fast %+v\ncbor-gen %+v", i, got, &want)
		}
	}
}

// TestCommitFastPathDefers: bodies outside the fast shape are left to
// cbor-gen (ok false), whatever cbor-gen then decides.
func TestCommitFastPathDefers(t *testing.T) {
	body := commitBodies(t)[0]
	cases := map[string][]byte{
		"empty":         {},
		"not-a-map":     {0x80},
		"unknown-field": append([]byte{0xa1, 0x63, 'z', 'z', 'z'}, 0x01),
		"repeated-seq":  {0xa2, 0x63, 's', 'e', 'q', 0x01, 0x63, 's', 'e', 'q', 0x02},
		"non-minimal":   {0xa1, 0x63, 's', 'e', 'q', 0x18, 0x01},
		"indefinite":    {0xbf, 0xff},
		"truncated":     body[:len(body)/2],
		"op-unknown":    {0xa1, 0x63, 'o', 'p', 's', 0x81, 0xa1, 0x61, 'x', 0x01},
		"ops-count-lie": {0xa1, 0x63, 'o', 'p', 's', 0x99, 0x10, 0x00},
	}
	for name, b := range cases {
		if _, _, ok := decodeCommitFast(b); ok {
			t.Errorf("%s: fast path accepted it", name)
		}
	}
}

// FuzzCommitFastMatchesCborGen: whenever the fast decoder accepts bytes,
// cbor-gen accepts the same bytes, consumes as many, and returns a deeply
// equal commit; so taking the fast path never changes what DecodeFrame
// returns. It never panics. Seeds: cbor-gen encodings of real commits with
// every optional field set and unset, their truncations, and the shapes of
// TestCommitFastPathDefers. Run: go test ./upstream -fuzz FuzzCommitFastMatchesCborGen
func FuzzCommitFastMatchesCborGen(f *testing.F) {
	for _, b := range commitBodies(f) {
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte{0xa2, 0x63, 's', 'e', 'q', 0x01, 0x63, 's', 'e', 'q', 0x02})
	f.Add([]byte{0xa1, 0x63, 'o', 'p', 's', 0x81, 0xa1, 0x61, 'x', 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, n, ok := decodeCommitFast(data)
		if !ok {
			return
		}
		br := bytes.NewReader(data)
		var want comatproto.SyncSubscribeRepos_Commit
		if err := want.UnmarshalCBOR(br); err != nil {
			t.Fatalf("fast path accepted what cbor-gen refuses: %v", err)
		}
		if used := len(data) - br.Len(); used != n {
			t.Fatalf("fast path used %d bytes, cbor-gen %d", n, used)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("fast %+v\ncbor-gen %+v", got, &want)
		}
	})
}

// TestCommitHeaderIsCanonical: commitHeader is byte for byte what
// EncodeFrame writes, so real frames take the fast path, and DecodeFrame
// of a fast-path frame equals the general path's result.
func TestCommitHeaderIsCanonical(t *testing.T) {
	fx := buildCommit(t)
	msg := mustEncode(t, &Frame{Op: FrameOpMessage, Type: TypeCommit, Commit: fx.evt})
	if !bytes.HasPrefix(msg, []byte(commitHeader)) {
		t.Fatalf("EncodeFrame header %x, fast path expects %x", msg[:len(commitHeader)], commitHeader)
	}
	fast, err := decodeFrame(msg)
	if err != nil {
		t.Fatal(err)
	}
	// The general path: the same frame with its header keys reordered.
	slow := append(rawHeader(t, "op", 1, "t", TypeCommit), msg[len(commitHeader):]...)
	general, err := decodeFrame(slow)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("fast %+v\ngeneral %+v", fast, general)
	}
	if _, err := decodeFrame(append(msg, 0xf6)); err == nil {
		t.Fatal("trailing byte accepted on the fast path")
	}
}
