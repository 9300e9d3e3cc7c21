package crash_test

// TestSilentAndReplayingSubscribers: the real binary in steady state, with
// replaying subscribers (cursor 0, reading as fast as they can, and
// starting over when through) and silent ones (cursor 0 but never reading,
// or requireHello but never saying hello), plus one live subscriber. The
// process's peak RSS (VmHWM) stays under the bound its flags configure,
// every silent subscriber is closed within the stall (or hello) timeout,
// and the live subscriber's latency keeps p99 ≤ 50 ms.
//
// Latency is measured from the event's time_us to its arrival at the
// client: time_us is stamped by the archive writer when it allocates the
// seq, before the synced commit, so the figure is what a client waits for
// an event once backstream has it, fsync included — the same measure as
// backstream_live_delivery_seconds and the live benchmark. The relay's own
// delay is not in it.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/internal/procstat"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

func TestSilentAndReplayingSubscribers(t *testing.T) {
	// The window is long enough that p99 is the service's and not one
	// pause of the machine's: the live subscriber gets about 170 events a
	// second, so over 30 s p99 is the 50th slowest of some 5,000, and a
	// single 200 ms stall of a shared machine delays about 30 of them past
	// 50 ms. Over 10 s one such stall failed CI (p99 50.2 ms, max 210.8 ms,
	// no commit over 64 ms) where quiet runs give 15–21 ms.
	replaying, silent, measure := 2000, 2000, 30*time.Second
	if testing.Short() {
		replaying, silent, measure = 150, 150, 3*time.Second
	}
	const (
		stall   = 3 * time.Second
		perConn = 96 << 10 // two goroutine stacks, gorilla's read buffer, net/http's conn and bufio, the GC's headroom over them
		// Each subscriber's reservation from the buffer budget: its buffers
		// (subscribe.bufferReservation) and its filter's estimate, nothing
		// for these subscribers, which ask for no DIDs or collections.
		reserve = 128 << 10
	)
	total := replaying + silent + 1
	budget := int64(total+replaying) * reserve
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 500, RecordsMean: 20, Hosts: 2, Rate: 100, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	h := crash.New(t, network, crash.Options{Args: append(append([]string(nil), serveArgs...),
		"--subscriber-stall-timeout", stall.String(), "--subscriber-hello-timeout", stall.String(),
		"--subscriber-buffer-budget", strconv.FormatInt(budget, 10),
		// A replaying client redials at once: its old connection may still count.
		"--max-subscribers", strconv.Itoa(total+replaying), "--max-subscribers-per-ip", strconv.Itoa(total+replaying),
		// Every client is on 127.0.0.1: the listener's per-address cap is off.
		"--max-conns-per-ip", "0")})
	p := h.Start()
	st := h.WaitPhase(p, "steady_state", 3*time.Minute)
	base := procKB(t, p, "VmRSS")
	// The budget bounds the subscribers' live buffers and filters; the heap
	// the Go runtime keeps for them is up to twice that (GOGC=100 lets the heap
	// grow to twice what is live before it collects), as perConn counts
	// for the rest of a connection.
	bound := base<<10 + 2*budget + int64(total)*perConn
	archived := st.Archive.TipSeq
	t.Logf("steady state with %d events archived; RSS %d MiB before subscribers; bound %d MiB (that + twice the budget %d MiB + %d KiB per connection)",
		archived, base>>10, bound>>20, budget>>20, perConn>>10)

	url := "ws://" + p.Listen + "/subscribe"
	var stopping atomic.Bool

	// The live subscriber.
	live, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	var (
		measuring atomic.Bool
		latMu     sync.Mutex
		lats      []float64 // of the current window
	)
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		for !stopping.Load() {
			_ = live.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, b, err := live.ReadMessage()
			if err != nil {
				break
			}
			if us, ok := timeUS(b); ok && measuring.Load() {
				ms := float64(time.Now().UnixMicro()-us) / 1000
				latMu.Lock()
				lats = append(lats, ms)
				latMu.Unlock()
			}
		}
	}()

	// Silent subscribers: a 4 KiB receive buffer, never read.
	var silentConns []net.Conn
	defer func() {
		for _, c := range silentConns {
			c.Close()
		}
	}()
	for i := 0; i < silent; i++ {
		q := "?cursor=0"
		if i%4 == 0 {
			q = "?requireHello=true"
		}
		c, err := dialSilent(url + q)
		if err != nil {
			t.Fatalf("silent subscriber %d: %v", i, err)
		}
		silentConns = append(silentConns, c)
	}
	// Replaying subscribers, in a child process (this test binary) at the
	// lowest CPU priority, as if they were on other machines: their reading
	// takes only CPU that backstream and the live subscriber leave idle.
	// From cursor 0 through the archive as it was, then start over.
	child := exec.Command("nice", "-n", "19", os.Args[0], "-test.run=^TestReplayClientProcess$")
	child.Env = append(os.Environ(), replayClientEnv+"=1", "URL="+url, fmt.Sprint("CONNS=", replaying), fmt.Sprint("EVENTS=", archived))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	var replayed atomic.Int64
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "REPLAYED "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				replayed.Store(n)
			}
		}
	}()
	connected := time.Now()
	t.Logf("%d silent subscribers connected; %d replaying", silent, replaying)

	// Silent ones are closed within the bound: the stall timeout counts from
	// the first write that blocks, once the socket buffers are full (the
	// archive is larger than they hold), which takes a few turns of the
	// replay readers among all the replaying subscribers.
	closedBy := connected.Add(stall + 10*time.Second)
	var closedAt time.Time
	for {
		m := metrics(t, p)
		if m[`backstream_subscribe_disconnects_total{reason="stalled"}`]+m[`backstream_subscribe_disconnects_total{reason="hello_timeout"}`] >= float64(silent) {
			closedAt = time.Now()
			break
		}
		if time.Now().After(closedBy) {
			t.Fatalf("silent subscribers not closed within %v of connecting: stalled %v, hello_timeout %v, subscribers %v", closedBy.Sub(connected),
				m[`backstream_subscribe_disconnects_total{reason="stalled"}`], m[`backstream_subscribe_disconnects_total{reason="hello_timeout"}`], m["backstream_subscribers"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("all %d silent subscribers closed %v after they were all connected (stall and hello timeouts %v)", silent, closedAt.Sub(connected).Round(time.Millisecond), stall)

	// The live subscriber's latency while the replays go on, over a window
	// in which the machine was backstream's: p99 ≤ 50 ms is a promise about
	// backstream, and on a machine busy with other work (other packages'
	// tests beside this one, another user of a shared machine) the tail is
	// that work's: 134 ms in a make test-long run that had it beside other
	// packages' builds and tests, 8–27 ms alone. A window whose p99 is over the bound while
	// other work took more than maxOther of the machine's CPU time is
	// measured again, up to windows times; the CPU time of backstream, of
	// this process (the network, the live and silent clients) and of the
	// replaying child is not other work, so a backstream that is slow
	// itself fails at its first window. So is a window in which a synced
	// commit of the writer took over 64 ms (its commits take 1–5 ms on this
	// machine: a sync the volume held, 69 events over 50 ms behind one such
	// commit in a CI run where other work took 0% of the CPU); a backstream
	// whose own commits are that slow fails once every window had one.
	windows := 4
	if testing.Short() {
		windows = 1
	}
	const maxOther = 0.2
	var (
		got        []float64
		p50, p99   float64
		rate       float64
		m0, m      map[string]float64
		other      float64
		otherShare []string
		slowSyncs  []string
		slow       float64 // synced commits over 64 ms in the window
	)
	const commits = "backstream_archive_commit_seconds"
	for w := 1; ; w++ {
		latMu.Lock()
		lats = nil
		latMu.Unlock()
		before := replayed.Load()
		m0 = metrics(t, p)
		c0 := readCPU(t, p.Cmd.Process.Pid, child.Process.Pid)
		measuring.Store(true)
		time.Sleep(measure) // the measurement window itself, not a wait for a condition
		measuring.Store(false)
		c1 := readCPU(t, p.Cmd.Process.Pid, child.Process.Pid)
		rate = float64(replayed.Load()-before) / measure.Seconds()
		m = metrics(t, p)
		latMu.Lock()
		got, lats = lats, nil
		latMu.Unlock()
		if len(got) < 50 {
			t.Fatalf("the live subscriber got %d events in %v", len(got), measure)
		}
		sort.Float64s(got)
		p50, p99 = got[len(got)/2], got[len(got)*99/100]
		other = c1.otherWork(c0)
		otherShare = append(otherShare, fmt.Sprintf("%.0f%%", 100*other))
		slow = (m[commits+"_count"] - m0[commits+"_count"]) - (m[commits+`_bucket{le="0.064"}`] - m0[commits+`_bucket{le="0.064"}`])
		slowSyncs = append(slowSyncs, fmt.Sprintf("%.0f", slow))
		t.Logf("window %d: live p99 %.1f ms; other work took %.0f%% of the machine's CPU time; %.0f synced commits over 64 ms", w, p99, 100*other, slow)
		if p99 <= 50 || (other <= maxOther && slow == 0) || w == windows {
			break
		}
	}
	hwm := procKB(t, p, "VmHWM")
	stopping.Store(true)
	live.Close()
	<-liveDone
	t.Logf("live subscriber: %d events, p50 %.1f ms, p99 %.1f ms, max %.1f ms; replays delivered %.0f events/s to %d subscribers; peak RSS %d MiB (bound %d MiB); subscribers now %v",
		len(got), p50, p99, got[len(got)-1], rate, replaying, hwm>>10, bound>>20, m["backstream_subscribers"])
	// How much of the tail is the disk: the writer's synced commits over
	// the window (a commit is inside every live event's latency).
	all := m[commits+"_count"] - m0[commits+"_count"]
	t.Logf("synced commits over the window: %.0f, of which %.0f took over 64 ms", all, slow)
	// How much is backstream's up to the socket: its own measure of live
	// deliveries, to every subscriber on the live path, over the window.
	const delivery = "backstream_live_delivery_seconds"
	sent := m[delivery+"_count"] - m0[delivery+"_count"]
	late := sent - (m[delivery+`_bucket{le="0.05"}`] - m0[delivery+`_bucket{le="0.05"}`])
	t.Logf("live deliveries written over the window (%s): %.0f, of which %.0f over 50 ms", delivery, sent, late)
	if hwm<<10 > bound {
		t.Errorf("peak RSS %d MiB over the bound %d MiB", hwm>>10, bound>>20)
	}
	// Asserted at full size; under -short the 150 replays and the 150 silent
	// ones share a loaded 2-core CI machine with everything else, and the
	// tail there is the machine's: logged, not asserted.
	switch {
	case p99 <= 50 || testing.Short():
	case other > maxOther || slow > 0:
		t.Errorf("live p99 %.1f ms, want ≤ 50 ms; in each of %d windows other work took over %.0f%% of the machine's CPU time (%s) or a synced commit over 64 ms (%s): run the test alone",
			p99, len(otherShare), 100*maxOther, strings.Join(otherShare, ", "), strings.Join(slowSyncs, ", "))
	default:
		t.Errorf("live p99 %.1f ms, want ≤ 50 ms", p99)
	}
	if rate == 0 {
		t.Error("the replaying subscribers got nothing during the measurement")
	}
}

const replayClientEnv = "BACKSTREAM_TEST_REPLAY_CLIENT"

// TestReplayClientProcess is the child side of
// TestSilentAndReplayingSubscribers: CONNS subscribers replay EVENTS events
// from cursor 0 against URL, over and over, until the parent kills it,
// printing the events read every 100 ms.
func TestReplayClientProcess(t *testing.T) {
	if os.Getenv(replayClientEnv) == "" {
		t.Skip("helper process of TestSilentAndReplayingSubscribers")
	}
	url := os.Getenv("URL")
	conns, _ := strconv.Atoi(os.Getenv("CONNS"))
	events, _ := strconv.ParseUint(os.Getenv("EVENTS"), 10, 64)
	var count atomic.Int64
	var stop atomic.Bool
	for i := 0; i < conns; i++ {
		go func() {
			for {
				if err := replayOnce(url, events, &count, &stop); err != nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for {
		time.Sleep(100 * time.Millisecond)
		fmt.Printf("REPLAYED %d\n", count.Load())
	}
}

// replayOnce reads n events from cursor 0 (without decoding them).
func replayOnce(url string, n uint64, count *atomic.Int64, stop *atomic.Bool) error {
	c, _, err := websocket.DefaultDialer.Dial(url+"?cursor=0&includeSync=true", nil) // every archived row, the sync markers too
	if err != nil {
		return err
	}
	defer c.Close()
	for i := uint64(0); i < n && !stop.Load(); i++ {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, r, err := c.NextReader()
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
		count.Add(1)
	}
	return nil
}

// dialSilent opens a websocket with a 4 KiB receive buffer and returns the
// raw connection, which the caller never reads.
func dialSilent(url string) (net.Conn, error) {
	var raw net.Conn
	d := &websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nd := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			if err != nil {
				return err
			}
			return serr
		}}
		c, err := nd.DialContext(ctx, network, addr)
		raw = c
		return c, err
	}}
	if _, _, err := d.Dial(url, nil); err != nil {
		return nil, err
	}
	return raw, nil
}

// timeUS reads "time_us" from an event's JSON without decoding it.
func timeUS(b []byte) (int64, bool) {
	i := bytes.Index(b[:min(len(b), 200)], []byte(`"time_us":`))
	if i < 0 {
		return 0, false
	}
	j := i + len(`"time_us":`)
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	us, err := strconv.ParseInt(string(b[j:k]), 10, 64)
	return us, err == nil
}

// procKB is a field of /proc/<pid>/status, in KiB.
func procKB(t *testing.T, p *crash.Proc, field string) int64 {
	t.Helper()
	kb, err := procstat.StatusKB(p.Cmd.Process.Pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

// metrics reads the process's /metrics as name{labels} → value.
func metrics(t *testing.T, p *crash.Proc) map[string]float64 {
	t.Helper()
	m, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cpuTimes is a reading of the machine's busy CPU time and of the CPU time
// of the processes the test runs (this one and those named), and when it
// was taken.
type cpuTimes struct {
	at         time.Time
	busy, ours time.Duration
}

// readCPU reads the machine's busy time (procstat.MachineBusy says what it
// counts) and the user and system time of this process and of pids.
func readCPU(t *testing.T, pids ...int) cpuTimes {
	t.Helper()
	c := cpuTimes{at: time.Now()}
	var err error
	if c.busy, err = procstat.MachineBusy(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append([]int{os.Getpid()}, pids...) {
		d, err := procstat.CPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		c.ours += d
	}
	return c
}

// otherWork is the share of the machine's CPU time from since to c that
// went to other processes than the test's.
func (c cpuTimes) otherWork(since cpuTimes) float64 {
	capacity := c.at.Sub(since.at) * time.Duration(runtime.NumCPU())
	return max(0, float64((c.busy-since.busy)-(c.ours-since.ours))/float64(capacity))
}
