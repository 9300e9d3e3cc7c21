package archive

import (
	"context"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
)

// BenchmarkDeleteInLargeCollection measures the writer's cost of a live
// delete of a downloaded record in a collection of n records (the record
// index holds them as run entries of up to maxRun members): the tombstone
// names the record's create, found through the collection's runs. An
// account deleting all its likes one by one makes n of these. Reported:
// CPU-µs per delete (the process's, from getrusage; the setup is outside
// the window).
func BenchmarkDeleteInLargeCollection(b *testing.B) {
	for _, n := range []int{4096, 65536, 262144} {
		b.Run("records"+strconv.Itoa(n), func(b *testing.B) { benchDeleteInCollection(b, n) })
	}
}

func benchDeleteInCollection(b *testing.B, n int) {
	s := openDiskStore(b)
	defer s.Close()
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	acks := NewAcks()
	submit := func(evs []Event) {
		if err := w.Submit(ctx, &Unit{Events: evs, Acks: acks}); err != nil {
			b.Fatal(err)
		}
	}
	const did = "did:plc:bigbigbigbigbigbigbigbig"
	const chunk = maxRun
	for i := 0; i < n; i += chunk {
		evs := make([]Event, min(chunk, n-i))
		for j := range evs {
			evs[j] = realisticEvent(i + j)
			evs[j].DID, evs[j].Collection, evs[j].RKey = did, "app.bsky.feed.like", benchRKey(i+j)
			evs[j].Rev = "3a"
		}
		if _, err := w.Apply(ctx, &Unit{Events: evs}); err != nil { // durable before the next
			b.Fatal(err)
		}
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := order[i%n]
		submit([]Event{{Kind: KindDelete, DID: did, Collection: "app.bsky.feed.like",
			RKey: benchRKey(k), Rev: revN(i), Source: SourceLive}})
		if i%64 == 63 {
			acks.Drain(nil)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)
	b.ReportMetric(cpu/float64(b.N)*1e6, "cpu-µs/delete")
}
