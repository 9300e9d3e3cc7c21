package bootstrap

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// drain hands out every ready repo and finishes each at once, returning
// the hosts in the order they were served.
func drain(s *scheduler) []string {
	var served []string
	for {
		j, ok := s.peek()
		if !ok {
			return served
		}
		s.take(j)
		s.done(j.host)
		served = append(served, j.host)
	}
}

// TestSchedulerForgetsDrainedHosts: peek scans the round-robin from where
// it left off, so the round-robin must hold only hosts with ready repos. At
// 30,000 roster hosts of which a few still have repos queued, keeping every
// host ever pushed made each dispatch scan thousands of empty queues.
func TestSchedulerForgetsDrainedHosts(t *testing.T) {
	s := newScheduler(2)
	const hosts = 10_000
	for i := range hosts {
		s.push(fmt.Sprintf("h%05d", i), fmt.Sprintf("d%05d", i))
	}
	if got := drain(s); len(got) != hosts {
		t.Fatalf("served %d repos, want %d", len(got), hosts)
	}
	s.push("a", "a1")
	s.push("b", "b1")
	if len(s.order) != 2 || len(s.queues) != 2 {
		t.Fatalf("after %d hosts drained and 2 pushed, peek scans a round-robin of %d hosts (%d queues kept), want 2",
			hosts, len(s.order), len(s.queues))
	}
	if got := drain(s); !slices.Equal(got, []string{"a", "b"}) || s.len() != 0 {
		t.Fatalf("served %v, %d left; want [a b], none", got, s.len())
	}
}

// TestSchedulerFairAcrossDrainAndRefill: the round-robin serves each host
// with ready repos once per round, a host drained leaves the round and one
// pushed again joins it, and a moved repo (reattributed) is served under
// its new host, its old host leaving the round when that was its last.
func TestSchedulerFairAcrossDrainAndRefill(t *testing.T) {
	s := newScheduler(100)
	for _, h := range []string{"a", "b", "c"} {
		for i := range 3 {
			s.push(h, fmt.Sprintf("%s%d", h, i))
		}
	}
	s.push("c", "c3")
	take := func(n int) []string {
		var got []string
		for range n {
			j, ok := s.peek()
			if !ok {
				break
			}
			s.take(j)
			s.done(j.host)
			got = append(got, j.did)
		}
		return got
	}
	if got := take(6); !slices.Equal(got, []string{"a0", "b0", "c0", "a1", "b1", "c1"}) {
		t.Fatalf("first two rounds %v", got)
	}
	s.push("d", "d0")
	s.push("d", "d1")
	// d joins the round: each of the four hosts once, in some order.
	if got := take(4); !sameSet(got, "a2", "b2", "c2", "d0") {
		t.Fatalf("third round %v, want a2 b2 c2 d0 in some order", got)
	}
	// a and b are drained: the rest is c's and d's, one each.
	if got := take(4); !sameSet(got, "c3", "d1") {
		t.Fatalf("after a and b drained: %v, want c3 d1", got)
	}
	s.push("a", "a9")
	j, ok := s.peek()
	if !ok || j.did != "a9" {
		t.Fatalf("peek %+v %v, want a9", j, ok)
	}
	s.move(j, "e")
	if !slices.Equal(s.order, []string{"e"}) || s.len() != 1 {
		t.Fatalf("after a's last repo moved to e: round-robin %v, %d ready; want [e], 1", s.order, s.len())
	}
	s.push("e", "e1")
	if got := take(3); !slices.Equal(got, []string{"a9", "e1"}) {
		t.Fatalf("after the move: %v, want a9 e1", got)
	}
}

// sameSet reports whether got holds exactly want, in any order.
func sameSet(got []string, want ...string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// TestSchedulerNeverIdlesWork: under random pushes, hand-outs, moves and
// completions, no host runs more than its cap, peek finds a repo whenever
// some host with ready repos is under its cap, and every repo pushed is
// handed out exactly once.
func TestSchedulerNeverIdlesWork(t *testing.T) { schedulerModel(t, 1, false) }

// TestSchedulerParkedHostsWaitTheirTime: the same with parks (a host whose
// announced rate limit is spent) and the clock moving on: peek never hands
// out a repo of a parked host, finds one whenever a host that is not
// parked has ready repos and is under its cap, and a parked host is handed
// out again once its time has come (wake). Every repo pushed is handed out
// exactly once, and dispatchable counts the ready repos of the hosts not
// parked.
func TestSchedulerParkedHostsWaitTheirTime(t *testing.T) { schedulerModel(t, 3, true) }

// schedulerModel runs 20,000 random steps of the scheduler against a model
// of it (ready repos by host, jobs running, parked hosts when parks),
// checking each step, then the end: with every park's time passed and
// every job done, everything left is handed out, each repo once.
func schedulerModel(t *testing.T, seed uint64, parks bool) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	const hostCap = 2
	s := newScheduler(hostCap)
	queued := map[string][]string{} // the model: ready repos by host
	busy := map[string]int{}
	until := map[string]time.Time{} // the model's parked hosts
	now := time.Unix(0, 0)
	var running []job
	handed := map[string]int{}
	pushed := 0
	for step := range 20_000 {
		if parks && rng.IntN(20) == 0 {
			now = now.Add(time.Duration(rng.IntN(5)) * time.Second)
			s.wake(now)
			for h, u := range until {
				if !u.After(now) {
					delete(until, h)
				}
			}
		}
		switch r := rng.IntN(10); {
		case r < 4:
			h := fmt.Sprintf("h%d", rng.IntN(20))
			d := fmt.Sprintf("d%d", pushed)
			pushed++
			s.push(h, d)
			queued[h] = append(queued[h], d)
		case r < 5 && len(running) > 0:
			i := rng.IntN(len(running))
			j := running[i]
			running = slices.Delete(running, i, i+1)
			s.done(j.host)
			busy[j.host]--
		default:
			j, ok := s.peek()
			eligible := false
			for h, q := range queued {
				_, parked := until[h]
				eligible = eligible || (len(q) > 0 && busy[h] < hostCap && !parked)
			}
			if ok != eligible {
				t.Fatalf("step %d: peek found a repo: %v, a host not parked under its cap has one: %v", step, ok, eligible)
			}
			if !ok {
				continue
			}
			if _, parked := until[j.host]; parked {
				t.Fatalf("step %d: peek %+v of a host parked until %v (now %v)", step, j, until[j.host], now)
			}
			if q := queued[j.host]; len(q) == 0 || q[0] != j.did || busy[j.host] >= hostCap {
				t.Fatalf("step %d: peek %+v: queue %v, busy %d", step, j, q, busy[j.host])
			}
			switch rng.IntN(8) {
			case 0:
				if parks {
					u := now.Add(time.Duration(1+rng.IntN(10)) * time.Second)
					s.park(j.host, u)
					until[j.host] = u
					continue
				}
			case 1:
				queued[j.host] = queued[j.host][1:]
				to := fmt.Sprintf("h%d", rng.IntN(20))
				s.move(j, to)
				queued[to] = append(queued[to], j.did)
				continue
			}
			queued[j.host] = queued[j.host][1:]
			s.take(j)
			busy[j.host]++
			handed[j.did]++
			running = append(running, j)
		}
		n, free := 0, 0
		for h, q := range queued {
			n += len(q)
			if _, parked := until[h]; !parked {
				free += len(q)
			}
		}
		if s.len() != n || s.dispatchable() != free || len(s.order)+len(s.parked) != len(s.queues) {
			t.Fatalf("step %d: %d ready (%d dispatchable), want %d (%d); round-robin of %d hosts and %d parked, %d queues",
				step, s.len(), s.dispatchable(), n, free, len(s.order), len(s.parked), len(s.queues))
		}
	}
	// The clock moves past every park: everything left is handed out.
	s.wake(now.Add(time.Hour))
	for _, j := range running {
		s.done(j.host)
	}
	drain(s)
	if s.len() != 0 || len(s.parked) != 0 {
		t.Fatalf("after every park's time: %d repos left, %d hosts parked", s.len(), len(s.parked))
	}
	for d, n := range handed {
		if n != 1 {
			t.Fatalf("%s handed out %d times", d, n)
		}
	}
}

// BenchmarkSchedulerManyHosts is one dispatch (push, peek, take, done)
// with two hosts working after emptied hosts were pushed and drained: its
// cost must not grow with the hosts that no longer have work.
func BenchmarkSchedulerManyHosts(b *testing.B) {
	for _, emptied := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("emptied=%d", emptied), func(b *testing.B) {
			s := newScheduler(8)
			for i := range emptied {
				s.push(fmt.Sprintf("h%06d", i), "d")
			}
			drain(s)
			hosts := [2]string{"a", "b"}
			b.ResetTimer()
			for i := range b.N {
				s.push(hosts[i%2], "d")
				j, _ := s.peek()
				s.take(j)
				s.done(j.host)
			}
		})
	}
}
