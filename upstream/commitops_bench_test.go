package upstream

import "testing"

// BenchmarkCommitOps: a real three-op sync-1.1 commit (commit block, MST
// diff nodes, two records) through CommitOps: CAR read with hash checks,
// path validation, record lookup.
func BenchmarkCommitOps(b *testing.B) {
	fx := buildCommit(b)
	b.SetBytes(int64(len(fx.evt.Blocks)))
	b.ReportAllocs()
	for b.Loop() {
		ops, err := CommitOps(fx.evt)
		if err != nil || len(ops) != 3 {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFrame: the same commit as a wire frame through DecodeFrame.
func BenchmarkDecodeFrame(b *testing.B) {
	fx := buildCommit(b)
	msg := mustEncode(b, &Frame{Op: FrameOpMessage, Type: TypeCommit, Commit: fx.evt})
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := DecodeFrame(msg)
		if err != nil || f.Commit == nil {
			b.Fatal(err)
		}
	}
}
