package main

// This file owns the public listener's connection caps and the file
// descriptors they may use: serve raises RLIMIT_NOFILE's soft limit to the
// hard one at start, keeps a reserve of descriptors for the store and the
// downloads, and derives the default global cap from what is left. Beyond
// a cap a new connection gets a minimal 503 (global) or 429 (per client
// address) and is closed, counted; Accept never blocks on it.

import (
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/clientkey"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/merge"
)

// Connection caps and the descriptor reserve.
const (
	// DefaultMaxConnsPerIP is the default cap of open connections per
	// client address (an IPv6 client: per /64).
	DefaultMaxConnsPerIP = 256
	// fixedFDs covers the rest of the process: the listeners, the
	// firehose, the simulated network under --devnet, stdio and Go's own.
	fixedFDs = 64
	// fdsPerDownload is a download's socket and its scratch file.
	fdsPerDownload = 2
	// fallbackMaxConns is the global cap when RLIMIT_NOFILE cannot be read.
	fallbackMaxConns = 1024
	// minAutoConns: when the reserve leaves less than this, the automatic
	// cap is a quarter of the limit instead (and a warning says so).
	minAutoConns = 64
	// refusers bounds the goroutines answering refused connections; beyond
	// it a refused connection gets its answer without waiting for the
	// client to read it (which a reset may then lose).
	refusers = 128
	// refuseTimeout bounds one refusal: the answer, then draining the
	// client's request until it closes.
	refuseTimeout = 2 * time.Second
	// capLogEvery: a cap that trips logs one line per this period.
	capLogEvery = time.Minute
)

// fdLimit is RLIMIT_NOFILE as serve found and left it.
type fdLimit struct {
	Soft, Hard uint64 // after raising
	Was        uint64 // the soft limit found
}

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit. (Go's os
// package already does so when the process starts, and gives children the
// original back; this makes it explicit, and reports what serve runs with.)
func raiseFDLimit() (fdLimit, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fdLimit{}, err
	}
	l := fdLimit{Soft: rl.Cur, Hard: rl.Max, Was: rl.Cur}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return l, err
		}
		l.Soft = rl.Max
	}
	return l, nil
}

// fdReserve is the descriptors kept for everything but admitted client
// connections: the store (archive.FileDescriptors), every download that may
// run at once (backfill workers, retry workers, the pending pass:
// fdsPerDownload each), fixedFDs, and the refused connections held while
// they get their answer (refusers).
func fdReserve(backfillWorkers, retryWorkers int) uint64 {
	return archive.FileDescriptors + fixedFDs + refusers + fdsPerDownload*uint64(backfillWorkers+retryWorkers+merge.DefaultPendingWorkers)
}

// autoMaxConns is the default global cap: the soft limit minus the
// reserve, or a quarter of the limit when that leaves less than
// minAutoConns (ok=false: the limit is too low for the reserve).
func autoMaxConns(soft, reserve uint64) (n int, ok bool) {
	if soft > reserve+minAutoConns {
		return int(min(soft-reserve, 1<<30)), true
	}
	return int(max(soft/4, 16)), false
}

// connLimits are the caps of one listener; 0 means none.
type connLimits struct {
	Global, PerIP int
}

// connMetrics are the public listener's connection metrics.
type connMetrics struct {
	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

// Refusal reasons (the label of backstream_http_connections_refused_total).
const (
	refusedGlobal = "global"
	refusedPerIP  = "per_ip"
)

func newConnMetrics(reg prometheus.Registerer, lim connLimits) *connMetrics {
	m := &connMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_http_connections", Help: "Open connections on the public listener (websockets included).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_http_connections_refused_total",
			Help: "Connections the public listener refused: global (503, --max-conns) or per_ip (429, --max-conns-per-ip).",
		}, []string{"reason"}),
	}
	limit := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backstream_http_connection_limit", Help: "The public listener's connection caps (0 = none).",
	}, []string{"scope"})
	limit.WithLabelValues(refusedGlobal).Set(float64(lim.Global))
	limit.WithLabelValues(refusedPerIP).Set(float64(lim.PerIP))
	m.refused.WithLabelValues(refusedGlobal)
	m.refused.WithLabelValues(refusedPerIP)
	if reg != nil {
		reg.MustRegister(m.open, m.refused, limit)
	}
	return m
}

// limitListener enforces connLimits on the connections it accepts.
type limitListener struct {
	net.Listener
	lim connLimits
	m   *connMetrics
	log *slog.Logger
	// refusals spaces the log lines: one per refusal reason per capLogEvery.
	refusals *loglimit.Every

	mu    sync.Mutex
	open  int
	perIP map[string]int

	refusing chan struct{} // semaphore of refusal goroutines
	wg       sync.WaitGroup
}

func newLimitListener(ln net.Listener, lim connLimits, m *connMetrics, log *slog.Logger) *limitListener {
	return &limitListener{
		Listener: ln, lim: lim, m: m, log: log,
		perIP: map[string]int{}, refusals: loglimit.New(capLogEvery, nil),
		refusing: make(chan struct{}, refusers),
	}
}

// Accept returns the next connection within the caps, answering and
// closing the others.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientkey.OfAddr(c.RemoteAddr())
		if reason := l.admit(key); reason != "" {
			l.refuse(c, reason)
			continue
		}
		l.m.open.Inc()
		return &limitedConn{Conn: c, l: l, key: key}, nil
	}
}

// Close closes the listener and waits for the refusals in flight.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// admit counts a new connection from key, or says which cap refuses it.
func (l *limitListener) admit(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lim.Global > 0 && l.open >= l.lim.Global:
		return refusedGlobal
	case l.lim.PerIP > 0 && l.perIP[key] >= l.lim.PerIP:
		return refusedPerIP
	}
	l.open++
	l.perIP[key]++
	return ""
}

func (l *limitListener) release(key string) {
	l.mu.Lock()
	l.open--
	if l.perIP[key]--; l.perIP[key] <= 0 {
		delete(l.perIP, key)
	}
	l.mu.Unlock()
	l.m.open.Dec()
}

// refusal answers are whole HTTP/1.1 responses: a client (a websocket
// handshake included) reads the status before the connection closes.
var refusalAnswers = map[string][]byte{
	refusedGlobal: refusalAnswer("503 Service Unavailable", "backstream: too many connections; retry later\n"),
	refusedPerIP:  refusalAnswer("429 Too Many Requests", "backstream: too many connections from your address\n"),
}

func refusalAnswer(status, body string) []byte {
	return []byte("HTTP/1.1 " + status + "\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 5\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// refuse counts and logs a refusal, then answers and closes c on a
// goroutine of its own (at most refusers at once; beyond, c gets its
// answer written into its empty send buffer and is closed at once), so
// Accept goes on.
func (l *limitListener) refuse(c net.Conn, reason string) {
	l.m.refused.WithLabelValues(reason).Inc()
	l.logRefusal(reason)
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = c.Write(refusalAnswers[reason])
		_ = c.Close()
		return
	}
	l.wg.Add(1)
	go func() {
		defer func() { <-l.refusing; l.wg.Done() }()
		answerAndClose(c, refusalAnswers[reason])
	}()
}

// answerAndClose writes answer, closes the write side and reads what the
// client sent until it closes (or refuseTimeout), so the answer is not
// lost to a reset from unread data.
func answerAndClose(c net.Conn, answer []byte) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	if _, err := c.Write(answer); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	var buf [4096]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// logRefusal logs one line per reason per capLogEvery, with the number of
// refusals it stands for (loglimit's occurrences).
func (l *limitListener) logRefusal(reason string) {
	msg, limit := "refusing connections: a client address reached its connection cap (429; --max-conns-per-ip)", l.lim.PerIP
	if reason == refusedGlobal {
		msg, limit = "refusing connections: the global connection cap is reached (503; --max-conns)", l.lim.Global
	}
	l.refusals.Log(l.log, slog.LevelWarn, reason, msg, "cap", limit, "open", openConns{l})
}

// openConns is the listener's open connections, read only when a line
// that names them is written.
type openConns struct{ l *limitListener }

func (o openConns) LogValue() slog.Value {
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	return slog.IntValue(o.l.open)
}

// limitedConn releases its slot when closed, once.
type limitedConn struct {
	net.Conn
	l      *limitListener
	key    string
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.key)
	}
	return err
}

// SyscallConn exposes the socket's descriptor (subscribe's non-blocking
// writes need it), when the wrapped connection has one.
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	if s, ok := c.Conn.(syscall.Conn); ok {
		return s.SyscallConn()
	}
	return nil, errors.New("connlimit: no file descriptor")
}
