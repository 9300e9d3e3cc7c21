package upstream

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeFrame: no input panics decodeFrame (called without the recover
// belt, so a real panic is found); a decoded frame has exactly one body and
// survives encode → decode with the same header and seq.
//
// Seeds: one real frame of every type (the #commit a signed sync-1.1 commit
// built with atproto/repo/mst), truncations of each (guards readers that
// trust declared lengths), and the malformed headers of
// TestDecodeFrameHeaderVariants. Run with: go test ./upstream -fuzz FuzzDecodeFrame
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames(f) {
		b := mustEncode(f, fr)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:len(b)-1])
		f.Add(append(append([]byte(nil), b...), 0xf6))
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
	f.Add([]byte{0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xa2, 0x61, 't', 0x67, '#', 'c', 'o', 'm', 'm', 'i', 't', 0x62, 'o', 'p', 0x01, 0xa1, 0x63, 'o', 'p', 's', 0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeFrame(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidFrame) && !errors.Is(err, ErrUnknownFrameType) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		n := 0
		for _, set := range []bool{fr.Commit != nil, fr.Sync != nil, fr.Identity != nil, fr.Account != nil, fr.Info != nil, fr.Error != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d bodies", n)
		}
		if fr.Commit != nil {
			// CommitOps must not panic on whatever blocks came in.
			_, _ = commitOps(fr.Commit)
		}
		b, err := EncodeFrame(&fr)
		if err != nil {
			return // e.g. a field over cbor-gen's encode limits
		}
		fr2, err := decodeFrame(b)
		if err != nil {
			t.Fatalf("re-decode of our own encoding: %v", err)
		}
		s1, ok1 := fr.Seq()
		s2, ok2 := fr2.Seq()
		if fr2.Op != fr.Op || (fr.Op == FrameOpMessage && fr2.Type != fr.Type) || s1 != s2 || ok1 != ok2 {
			t.Fatalf("round trip changed header or seq")
		}
		b2, err := EncodeFrame(&fr2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable: %v", err)
		}
	})
}

// FuzzCommitOps: arbitrary bytes as a commit's blocks never panic
// commitOps, and only typed errors come back. Seeds: the real commit's CAR
// and truncations of it.
func FuzzCommitOps(f *testing.F) {
	fx := buildCommit(f)
	blk := []byte(fx.evt.Blocks)
	f.Add(blk)
	f.Add(blk[:len(blk)/2])
	f.Add(blk[:40])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := *fx.evt
		c.Blocks = data
		ops, err := commitOps(&c)
		if err != nil {
			if !errors.Is(err, ErrBadBlocks) && !errors.Is(err, ErrCommitRootMismatch) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if len(ops) != len(c.Ops) {
			t.Fatalf("%d ops for %d", len(ops), len(c.Ops))
		}
	})
}
