package firehose

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
)

// verifyBenchFrames are n single-op #commit frames of a served network's
// accounts, a resolver on its PLC endpoint with every key cached, and the
// accounts.
func verifyBenchFrames(b *testing.B, n int) ([][]byte, *ident.Resolver, []string) {
	b.Helper()
	net, err := oracle.Start(context.Background(), oracle.Config{Accounts: 8, RecordsMean: 5, Hosts: 2, Seed: 3, Traffic: oracle.TrafficNone})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { net.Close() })
	w := net.World()
	dids := activeDIDs(w)
	frames := make([][]byte, n)
	for i := range frames {
		ev := must(b)(w.CreateRecord(dids[i%len(dids)], "app.bsky.feed.post", "", map[string]any{
			"$type": "app.bsky.feed.post", "text": fmt.Sprintf("post number %d with some text in it", i), "createdAt": "2024-01-01T00:00:00Z"}))
		frames[i] = encode(b, ev, int64(i+1))
	}
	id := ident.New(ident.Config{PLC: net.RelayURL(), Mode: ident.ModeStrict})
	for _, d := range dids {
		if _, _, err := id.Lookup(context.Background(), d); err != nil {
			b.Fatal(err)
		}
	}
	return frames, id, dids
}

// unprepare replaces the cached key of each of dids in id with atcrypto's
// own (k256.Prepare undone): the check before libsecp256k1, for an A/B in
// one process. Lookup hands out the cached *Info, so the change sticks.
func unprepare(b *testing.B, id *ident.Resolver, dids []string) {
	b.Helper()
	for _, d := range dids {
		info, _, err := id.Lookup(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		if info.Key, err = atcrypto.ParsePublicMultibase(info.KeyMultibase); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandleCommitVerify: BenchmarkHandleCommit with verification off
// and strict (keys cached): the consumer's frames/s through the capture
// writer, and CPU-µs per frame (process CPU over the run).
func BenchmarkHandleCommitVerify(b *testing.B) {
	const n = 5000
	frames, id, _ := verifyBenchFrames(b, n)
	for _, mode := range []string{"off", "strict"} {
		b.Run(mode, func(b *testing.B) {
			var res *ident.Resolver
			if mode == "strict" {
				res = id
			}
			s := openStore(b)
			wr := newWriter(b, s, true)
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Process(b)
			for i := 0; i < b.N; i++ {
				c, _ := newConsumer(b, Config{Writer: wr, Mode: ModeCapture, Identity: res})
				for _, f := range frames {
					if err := c.Handle(context.Background(), f); err != nil {
						b.Fatal(err)
					}
				}
				waitDurable(b, c, n)
			}
			b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "frames/s")
			b.ReportMetric((cputime.Process(b)-cpu0).Seconds()*1e6/float64(n*b.N), "cpu-µs/frame")
		})
	}
}

// BenchmarkVerifyCommitFrame: the verification alone of one decoded
// single-op #commit (blocks loaded, MST checked, inverted, signature with a
// cached key), with atcrypto's signature check and with the prepared key's
// (libsecp256k1 in cgo builds), alternating in one process: -count=6 gives
// six of each. Reports CPU-µs per frame (process CPU).
func BenchmarkVerifyCommitFrame(b *testing.B) {
	const n = 256
	for _, key := range []string{"atcrypto", "prepared"} {
		b.Run("key="+key, func(b *testing.B) {
			frames, id, dids := verifyBenchFrames(b, n)
			if key == "atcrypto" {
				unprepare(b, id, dids)
			}
			decoded := make([]upstream.Frame, n)
			for i, raw := range frames {
				f, err := upstream.DecodeFrame(raw)
				if err != nil {
					b.Fatal(err)
				}
				decoded[i] = f
			}
			c := &Consumer{cfg: Config{Identity: id}}
			b.ReportAllocs()
			i := 0
			cpu0 := cputime.Process(b)
			for b.Loop() {
				failed, err := c.verify(context.Background(), &decoded[i%n])
				if err != nil || failed != "" {
					b.Fatalf("verify: %q %v", failed, err)
				}
				i++
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/frame")
		})
	}
}

// BenchmarkLiveIngestVerify: the live consumer reading a preloaded history
// of basic traffic over a real websocket into the archive writer, from
// cursor 0 to the head, with verification off, strict with one verifier
// and strict with two (the default on 2 CPUs), every
// account's key cached, as after bootstrap. Reports events/s and CPU-s per
// million events (process CPU, the simulated relay's included, alike in
// all).
func BenchmarkLiveIngestVerify(b *testing.B) {
	const preload = 20000
	net, err := oracle.Start(context.Background(), oracle.Config{Accounts: 200, RecordsMean: 5, Hosts: 2, Seed: 4,
		Traffic: oracle.TrafficBasic, PreloadEvents: preload, Rate: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { net.Close() })
	head := int64(preload)
	for _, mode := range []string{"off", "strict-1", "strict-2"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				var id *ident.Resolver
				verifiers := 1
				if mode == "strict-2" {
					verifiers = 2
				}
				if mode != "off" {
					// Web: #identity handles are checked against the
					// simulated network (not DNS and the real one).
					id = ident.New(ident.Config{PLC: net.RelayURL(), Web: net.RelayURL(), Mode: ident.ModeStrict})
					for _, a := range net.World().Accounts() {
						_, _, _ = id.Lookup(context.Background(), a.DID)
					}
				}
				s := openStore(b)
				zero := int64(0)
				c, _ := newConsumer(b, Config{Relay: net.RelayURL(), Writer: newWriter(b, s, false), Mode: ModeLive, Cursor: &zero, Identity: id,
					Verifiers: verifiers})
				b.StartTimer()
				t0, cpu0 := time.Now(), cputime.Process(b)
				r := startRun(b, c)
				waitFor(b, 5*time.Minute, "the head durable", func() bool { return c.LastDurable() >= head })
				elapsed, cpu := time.Since(t0), cputime.Process(b)-cpu0
				b.StopTimer()
				if err := r.stop(b); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(head)/elapsed.Seconds(), "events/s")
				b.ReportMetric(cpu.Seconds()*1e6/float64(head), "cpu-s/1M-events")
				b.StartTimer()
			}
		})
	}
}

// BenchmarkLoadTree: a #commit's partial MST loaded by indigo's
// mst.LoadTreeFromStore and by loadTree, over basic traffic's commits to
// repos a few hundred records deep; CPU-µs per tree (process CPU).
func BenchmarkLoadTree(b *testing.B) {
	type frame struct {
		bs   upstream.CommitBlocks
		data cid.Cid
	}
	var frames []frame
	for _, ev := range trafficCommits(b, 256) {
		bs, err := upstream.ReadCommitBlocks(ev.Commit.Blocks, cid.Cid(ev.Commit.Commit))
		if err != nil {
			b.Fatal(err)
		}
		commit, err := decodeCommit(&bs, cid.Cid(ev.Commit.Commit))
		if err != nil {
			b.Fatal(err)
		}
		frames = append(frames, frame{bs, commit.commit.Data})
	}
	for _, loader := range []string{"indigo", "own"} {
		b.Run("loader="+loader, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu0 := cputime.Process(b)
			for b.Loop() {
				f := &frames[i%len(frames)]
				var err error
				if loader == "indigo" {
					_, err = mst.LoadTreeFromStore(context.Background(), indigoBlocks{&f.bs}, f.data)
				} else {
					_, err = loadTree(&f.bs, f.data)
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/tree")
		})
	}
}

// BenchmarkCommitUnsigned: a commit block of basic traffic decoded with
// the bytes its signature covers, by cbor-gen and UnsignedBytes (decode,
// encode again) and by decodeSignedCommit (read, cut); CPU-µs per commit
// (process CPU), -count=6 alternates the two.
func BenchmarkCommitUnsigned(b *testing.B) {
	var blocks [][]byte
	for _, ev := range trafficCommits(b, 256) {
		bs, err := upstream.ReadCommitBlocks(ev.Commit.Blocks, cid.Cid(ev.Commit.Commit))
		if err != nil {
			b.Fatal(err)
		}
		data, _ := bs.Get(cid.Cid(ev.Commit.Commit))
		blocks = append(blocks, data)
	}
	for _, how := range []string{"reencode", "cut"} {
		b.Run("how="+how, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu0 := cputime.Process(b)
			for b.Loop() {
				data := blocks[i%len(blocks)]
				var unsigned []byte
				if how == "cut" {
					s, ok := decodeSignedCommit(data)
					if !ok {
						b.Fatal("not taken")
					}
					unsigned = s.unsigned
				} else {
					var c repo.Commit
					if err := c.UnmarshalCBOR(bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
					var err error
					if unsigned, err = c.UnsignedBytes(); err != nil {
						b.Fatal(err)
					}
				}
				if len(unsigned) == 0 {
					b.Fatal("no bytes")
				}
				i++
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
		})
	}
}

// BenchmarkRootCID: the root CID of a #commit's partial MST with its ops
// inverted (the sync 1.1 check), by indigo's RootCID and by rootCID, over
// copies of basic traffic's inverted trees; CPU-µs per tree (process CPU,
// the copy included in both), -count=6 alternates the two.
func BenchmarkRootCID(b *testing.B) {
	trees, _ := invertedTrees(b, 256)
	for _, how := range []string{"indigo", "own"} {
		b.Run("how="+how, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			cpu0 := cputime.Process(b)
			for b.Loop() {
				tree := trees[i%len(trees)].Copy()
				var err error
				if how == "own" {
					_, err = rootCID(&tree)
				} else {
					_, err = tree.RootCID()
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
		})
	}
}
