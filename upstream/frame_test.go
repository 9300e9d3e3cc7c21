package upstream

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	cbg "github.com/whyrusleeping/cbor-gen"
)

func strp(s string) *string { return &s }

// sampleFrames returns one frame of every kind, the commit a real one.
func sampleFrames(t testing.TB) map[string]*Frame {
	fx := buildCommit(t)
	return map[string]*Frame{
		"commit": {Op: FrameOpMessage, Type: TypeCommit, Commit: fx.evt},
		"sync": {Op: FrameOpMessage, Type: TypeSync, Sync: &comatproto.SyncSubscribeRepos_Sync{
			Did: testDID, Rev: fx.evt.Rev, Seq: 12346, Time: fx.evt.Time,
			Blocks: writeCAR(t, fx.commit.Cid(), fx.blocks[:1]),
		}},
		"identity": {Op: FrameOpMessage, Type: TypeIdentity, Identity: &comatproto.SyncSubscribeRepos_Identity{
			Did: testDID, Handle: strp("alice.test"), Seq: 12347, Time: fx.evt.Time,
		}},
		"identity-nohandle": {Op: FrameOpMessage, Type: TypeIdentity, Identity: &comatproto.SyncSubscribeRepos_Identity{
			Did: testDID, Seq: 12348, Time: fx.evt.Time,
		}},
		"account": {Op: FrameOpMessage, Type: TypeAccount, Account: &comatproto.SyncSubscribeRepos_Account{
			Did: testDID, Active: false, Status: strp("takendown"), Seq: 12349, Time: fx.evt.Time,
		}},
		"info": {Op: FrameOpMessage, Type: TypeInfo, Info: &comatproto.SyncSubscribeRepos_Info{
			Name: "OutdatedCursor", Message: strp("Requested cursor exceeded limit. Possibly missing events"),
		}},
		"error": {Op: FrameOpError, Error: &ErrorFrame{Error: "FutureCursor", Message: "Cursor in the future."}},
	}
}

func TestFrameRoundTripEveryType(t *testing.T) {
	for name, f := range sampleFrames(t) {
		t.Run(name, func(t *testing.T) {
			b, err := EncodeFrame(f)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			got, err := DecodeFrame(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.Op != f.Op || got.Type != f.Type {
				t.Fatalf("header %d %q, want %d %q", got.Op, got.Type, f.Op, f.Type)
			}
			bodies := 0
			for _, set := range []bool{got.Commit != nil, got.Sync != nil, got.Identity != nil, got.Account != nil, got.Info != nil, got.Error != nil} {
				if set {
					bodies++
				}
			}
			if bodies != 1 {
				t.Fatalf("%d bodies set", bodies)
			}
			b2, err := EncodeFrame(&got)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if !bytes.Equal(b, b2) {
				t.Fatalf("round trip changed the bytes")
			}
			wantSeq, wantOK := f.Seq()
			if seq, ok := got.Seq(); seq != wantSeq || ok != wantOK {
				t.Fatalf("Seq %d %v, want %d %v", seq, ok, wantSeq, wantOK)
			}
			if got.DID() != f.DID() {
				t.Fatalf("DID %q want %q", got.DID(), f.DID())
			}
		})
	}
	fr := sampleFrames(t)
	got, _ := DecodeFrame(mustEncode(t, fr["commit"]))
	if got.Commit.Repo != testDID || len(got.Commit.Ops) != 3 || got.Commit.Seq != 12345 {
		t.Fatalf("commit fields: %+v", got.Commit)
	}
	got, _ = DecodeFrame(mustEncode(t, fr["error"]))
	if got.Error.Error != "FutureCursor" || got.Error.Message != "Cursor in the future." {
		t.Fatalf("error frame: %+v", got.Error)
	}
}

func mustEncode(t testing.TB, f *Frame) []byte {
	t.Helper()
	b, err := EncodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawHeader encodes a header map by hand, keys in the given order, so the
// decoder is tested against encodings other than our own.
func rawHeader(t testing.TB, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	cw := cbg.NewCborWriter(&buf)
	cw.WriteMajorTypeHeader(cbg.MajMap, uint64(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		writeText(cw, kv[i].(string))
		switch v := kv[i+1].(type) {
		case int:
			if v >= 0 {
				cw.WriteMajorTypeHeader(cbg.MajUnsignedInt, uint64(v))
			} else {
				cw.WriteMajorTypeHeader(cbg.MajNegativeInt, uint64(-v-1))
			}
		case string:
			writeText(cw, v)
		case []byte:
			buf.Write(v)
		}
	}
	return buf.Bytes()
}

func bodyBytes(t testing.TB, f *Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch {
	case f.Identity != nil:
		err = f.Identity.MarshalCBOR(&buf)
	case f.Account != nil:
		err = f.Account.MarshalCBOR(&buf)
	case f.Info != nil:
		err = f.Info.MarshalCBOR(&buf)
	case f.Commit != nil:
		err = f.Commit.MarshalCBOR(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeFrameHeaderVariants(t *testing.T) {
	fr := sampleFrames(t)
	idBody := bodyBytes(t, fr["identity"])
	cat := func(a ...[]byte) []byte { return bytes.Join(a, nil) }

	// op before t (cbor-gen struct order, as indigo's EventHeader writes it)
	f, err := DecodeFrame(cat(rawHeader(t, "op", 1, "t", "#identity"), idBody))
	if err != nil || f.Identity == nil || f.Identity.Handle == nil || *f.Identity.Handle != "alice.test" {
		t.Fatalf("op-first header: %v %+v", err, f)
	}
	// unknown extra header key is skipped
	if f, err = DecodeFrame(cat(rawHeader(t, "t", "#identity", "op", 1, "x", []byte{0xa1, 0x61, 0x61, 0x01}), idBody)); err != nil || f.Identity == nil {
		t.Fatalf("extra key: %v", err)
	}
	// error frame written with an explicit t is still an error frame
	errBody := mustEncode(t, fr["error"])[len(rawHeader(t, "op", -1)):]
	if f, err = DecodeFrame(cat(rawHeader(t, "op", -1, "t", "#whatever"), errBody)); err != nil || f.Error == nil || f.Error.Error != "FutureCursor" {
		t.Fatalf("error frame with t: %v %+v", err, f)
	}

	unknown := []struct {
		name string
		data []byte
	}{
		{"labels", cat(rawHeader(t, "t", "#labels", "op", 1), idBody)},
		{"handle", cat(rawHeader(t, "t", "#handle", "op", 1), idBody)},
		{"empty-t", cat(rawHeader(t, "t", "", "op", 1), idBody)},
	}
	for _, tc := range unknown {
		f, err := DecodeFrame(tc.data)
		if !errors.Is(err, ErrUnknownFrameType) || errors.Is(err, ErrInvalidFrame) {
			t.Errorf("%s: want ErrUnknownFrameType, got %v", tc.name, err)
		}
		if f.Op != 1 || f.Identity != nil {
			t.Errorf("%s: header-only frame expected, got %+v", tc.name, f)
		}
	}

	invalid := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not-a-map", []byte{0x01}},
		{"no-op", cat(rawHeader(t, "t", "#identity"), idBody)},
		{"no-t", cat(rawHeader(t, "op", 1), idBody)},
		{"op-2", cat(rawHeader(t, "t", "#identity", "op", 2), idBody)},
		{"op-0", cat(rawHeader(t, "t", "#identity", "op", 0), idBody)},
		{"op-string", cat(rawHeader(t, "t", "#identity", "op", "1"), idBody)},
		{"dup-op", cat(rawHeader(t, "op", 1, "op", 1, "t", "#identity"), idBody)},
		{"dup-t", cat(rawHeader(t, "t", "#identity", "t", "#identity", "op", 1), idBody)},
		{"header-only", rawHeader(t, "t", "#identity", "op", 1)},
		{"truncated-body", cat(rawHeader(t, "t", "#identity", "op", 1), idBody[:len(idBody)-3])},
		{"trailing-bytes", cat(rawHeader(t, "t", "#identity", "op", 1), idBody, []byte{0x00})},
		{"two-bodies", cat(rawHeader(t, "t", "#identity", "op", 1), idBody, idBody)},
		{"wrong-body-type", cat(rawHeader(t, "t", "#commit", "op", 1), []byte{0x83, 1, 2, 3})},
		{"error-frame-no-error", cat(rawHeader(t, "op", -1), []byte{0xa1, 0x67}, []byte("message"), []byte{0x61, 0x78})},
		{"error-frame-not-map", cat(rawHeader(t, "op", -1), []byte{0x01})},
		{"huge-map", []byte{0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"huge-op", cat([]byte{0xa2, 0x61, 't', 0x69}, []byte("#identity"), []byte{0x62, 'o', 'p', 0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, idBody)},
		{"min-int-op", cat([]byte{0xa2, 0x61, 't', 0x69}, []byte("#identity"), []byte{0x62, 'o', 'p', 0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, idBody)},
	}
	for _, tc := range invalid {
		f, err := DecodeFrame(tc.data)
		if !errors.Is(err, ErrInvalidFrame) {
			t.Errorf("%s: want ErrInvalidFrame, got %v (%+v)", tc.name, err, f)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "upstream: decode frame: ") {
			t.Errorf("%s: error not prefixed: %v", tc.name, err)
		}
	}
}

func TestEncodeFrameRefusesInconsistentFrames(t *testing.T) {
	for _, f := range []*Frame{
		{Op: FrameOpMessage, Type: TypeCommit},
		{Op: FrameOpMessage, Type: TypeSync, Commit: &comatproto.SyncSubscribeRepos_Commit{}},
		{Op: FrameOpError},
		{Op: 7, Type: TypeInfo, Info: &comatproto.SyncSubscribeRepos_Info{}},
	} {
		if _, err := EncodeFrame(f); !errors.Is(err, ErrInvalidFrame) {
			t.Errorf("EncodeFrame(%+v) = %v", f, err)
		}
	}
}

// TestDecodeFrameDoesNotAliasInput: the firehose consumer reuses its read
// buffer for the next message, so a decoded frame (and the commit ops taken
// from it) must not share memory with the input.
func TestDecodeFrameDoesNotAliasInput(t *testing.T) {
	for name, f := range sampleFrames(t) {
		t.Run(name, func(t *testing.T) {
			msg := mustEncode(t, f)
			want := append([]byte(nil), msg...)
			got, err := DecodeFrame(msg)
			if err != nil {
				t.Fatal(err)
			}
			var ops []Op
			if got.Commit != nil {
				if ops, err = CommitOps(got.Commit); err != nil {
					t.Fatal(err)
				}
			}
			for i := range msg {
				msg[i] = 0xa5
			}
			again, err := EncodeFrame(&got)
			if err != nil || !bytes.Equal(again, want) {
				t.Fatalf("frame changed when its input was overwritten (err %v)", err)
			}
			if got.Commit != nil {
				ops2, err := CommitOps(got.Commit)
				if err != nil || len(ops2) != len(ops) {
					t.Fatalf("ops after overwrite: %v", err)
				}
				for i := range ops {
					if ops[i].Collection != ops2[i].Collection || ops[i].RKey != ops2[i].RKey || !bytes.Equal(ops[i].Record, ops2[i].Record) {
						t.Fatalf("op %d changed", i)
					}
				}
			}
		})
	}
}
