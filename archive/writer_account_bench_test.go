package archive

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/backstream/backstream/internal/cputime"
)

// The benchmarks of this file measure the writer's cost of one live event
// of an account against the size or the history of that account, at three
// sizes 16 times apart: a cost that grows faster than the logarithm of the
// size is one account holding the writer, and every account behind it.
// Reported: CPU-µs per measured unit (the process's, from getrusage; the
// setup is outside the window).

const (
	heavyDID = "did:plc:bigbigbigbigbigbigbigbig"
	otherDID = "did:plc:smallsmallsmallsmallsmal"
	likes    = "app.bsky.feed.like"
)

// accountBench is a writer over a fresh disk store, with a producer's
// mailbox.
type accountBench struct {
	b    *testing.B
	w    *Writer
	acks *Acks
	rev  int
	sent int
}

func newAccountBench(b *testing.B) *accountBench {
	s := openDiskStore(b)
	b.Cleanup(func() { s.Close() })
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	return &accountBench{b: b, w: w, acks: NewAcks()}
}

// live submits one live commit of did, its events given their rev.
func (a *accountBench) live(did string, evs ...Event) {
	a.rev++
	for i := range evs {
		evs[i].DID, evs[i].Rev, evs[i].Source = did, revN(a.rev), SourceLive
	}
	if err := a.w.Submit(context.Background(), &Unit{Events: evs, Acks: a.acks}); err != nil {
		a.b.Fatal(err)
	}
	if a.sent++; a.sent%64 == 0 {
		a.acks.Drain(nil)
	}
}

// settle waits until every unit submitted so far is durable.
func (a *accountBench) settle() {
	if _, err := a.w.Apply(context.Background(), &Unit{}); err != nil {
		a.b.Fatal(err)
	}
}

// measure runs op b.N times and reports its CPU cost per call as unit.
func (a *accountBench) measure(unit string, op func(i int)) {
	a.settle()
	cpu0 := cputime.Process(a.b)
	a.b.ResetTimer()
	for i := 0; i < a.b.N; i++ {
		op(i)
	}
	if err := a.w.Close(); err != nil {
		a.b.Fatal(err)
	}
	a.b.StopTimer()
	cpu := (cputime.Process(a.b) - cpu0).Seconds()
	a.b.ReportMetric(cpu/float64(a.b.N)*1e6, unit)
}

func create(collection, rkey string, i int) Event {
	ev := realisticEvent(i)
	ev.Collection, ev.RKey = collection, rkey
	return ev
}

func deleteOf(collection, rkey string) Event {
	return Event{Kind: KindDelete, Collection: collection, RKey: rkey}
}

// BenchmarkDeleteInLargeCollection: a collection of n records downloaded
// (run entries of up to maxRun members), then a delete of one of its
// records, at random: the tombstone names the record's create, found
// through the collection's runs. An account deleting all its likes one by
// one makes n of these.
func BenchmarkDeleteInLargeCollection(b *testing.B) {
	for _, n := range []int{4096, 65536, 262144} {
		b.Run("records"+strconv.Itoa(n), func(b *testing.B) {
			a := newAccountBench(b)
			for i := 0; i < n; i += maxRun {
				evs := make([]Event, min(maxRun, n-i))
				for j := range evs {
					evs[j] = create(likes, benchRKey(i+j), i+j)
					evs[j].DID, evs[j].Rev = heavyDID, "3a"
				}
				if _, err := a.w.Apply(context.Background(), &Unit{Events: evs}); err != nil {
					b.Fatal(err)
				}
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			a.measure("cpu-µs/delete", func(i int) {
				a.live(heavyDID, deleteOf(likes, benchRKey(order[i%n])))
			})
		})
	}
}

// BenchmarkDeleteInLiveCollection: a collection of n records written live,
// four creates a commit (each commit's stretch of creates is foldable into a
// run entry), between other accounts' commits; then a delete of one of its
// records, at random.
func BenchmarkDeleteInLiveCollection(b *testing.B) {
	for _, n := range []int{1024, 16384, 262144} {
		b.Run("records"+strconv.Itoa(n), func(b *testing.B) {
			a := newAccountBench(b)
			for i := 0; i < n; i += 4 {
				a.live(heavyDID, create(likes, benchRKey(i), i), create(likes, benchRKey(i+1), i+1),
					create(likes, benchRKey(i+2), i+2), create(likes, benchRKey(i+3), i+3))
				a.live(otherDID, create(likes, benchRKey(i), i))
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			a.measure("cpu-µs/delete", func(i int) {
				a.live(heavyDID, deleteOf(likes, benchRKey(order[i%n])))
			})
		})
	}
}

// BenchmarkUpdateOfOneRecord: one record updated n times (a profile edited
// over years, compaction not yet run), then updated again.
func BenchmarkUpdateOfOneRecord(b *testing.B) {
	benchRepeated(b, "versions", "cpu-µs/update", func(a *accountBench, i int) {
		ev := create("app.bsky.actor.profile", "self", i)
		if i > 0 {
			ev.Kind = KindUpdate
		}
		a.live(heavyDID, ev)
	})
}

// BenchmarkRecreateOneRKey: one rkey created and deleted n times, then
// created and deleted again (measured: one create and one delete).
func BenchmarkRecreateOneRKey(b *testing.B) {
	benchRepeated(b, "cycles", "cpu-µs/cycle", func(a *accountBench, i int) {
		a.live(heavyDID, create(likes, "3lsame", i))
		a.live(heavyDID, deleteOf(likes, "3lsame"))
	})
}

// benchRepeated measures op(i) after op(0) … op(n-1), for three n.
func benchRepeated(b *testing.B, label, unit string, op func(a *accountBench, i int)) {
	for _, n := range []int{1024, 16384, 262144} {
		b.Run(label+strconv.Itoa(n), func(b *testing.B) {
			a := newAccountBench(b)
			for i := 0; i < n; i++ {
				op(a, i)
			}
			a.measure(unit, func(i int) { op(a, n+i) })
		})
	}
}

// BenchmarkDeleteAmongCollections: an account with n collections of two
// records each, then a delete of a record of one of them.
func BenchmarkDeleteAmongCollections(b *testing.B) {
	for _, n := range []int{625, 10000, 160000} {
		b.Run("collections"+strconv.Itoa(n), func(b *testing.B) {
			a := newAccountBench(b)
			coll := func(i int) string { return "com.example.c" + strconv.Itoa(1e6+i) }
			for i := 0; i < n; i++ {
				a.live(heavyDID, create(coll(i), "3la", i), create(coll(i), "3lb", i))
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			a.measure("cpu-µs/delete", func(i int) {
				k := order[i%n]
				a.live(heavyDID, deleteOf(coll(k), "3la"))
				a.live(heavyDID, create(coll(k), "3la", i)) // back, for the next round
			})
		})
	}
}
