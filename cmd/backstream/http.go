package main

// This file owns serve's two HTTP servers. The public listener (--listen)
// answers clients: /subscribe, /status, /healthz, /readyz and
// /zstd-dictionary, within its connection caps (connlimit.go) and
// timeouts. The admin listener (--admin-listen, loopback by default)
// answers the operator: /metrics, /debug/pprof/, POST /admin/checkpoint,
// and the probes and /status again, so they answer even when the public
// listener is saturated. Its /status is the whole report and its /healthz
// names a fatal error; the public ones leave out the operator's sections
// and error texts. Nothing of the admin surface is reachable on the public
// listener, whatever proxy stands in front of it.

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/backstream/backstream/internal/loglimit"
)

// HTTP server limits.
const (
	// DefaultAdminListen is the admin listener's default address.
	DefaultAdminListen = "127.0.0.1:6009"
	// DefaultHTTPIdleTimeout closes a keep-alive connection idle this long.
	DefaultHTTPIdleTimeout = 60 * time.Second
	// DefaultHTTPReadTimeout bounds reading a request, headers and body.
	// It never cuts a websocket: net/http clears the connection's read
	// deadline once a request's body is read (a GET has none), before the
	// handler runs, and gorilla's Upgrade clears its deadlines again, so a
	// subscriber's socket has none from the HTTP server (tested by
	// TestReadTimeoutSparesWebsockets).
	DefaultHTTPReadTimeout = 30 * time.Second
	// readHeaderTimeout bounds reading a request's headers.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request's line and headers: room for
	// /subscribe's 10,000 wantedDids in the query string.
	maxHeaderBytes = 1 << 20
	// errorLogMax truncates a line of http.Server's error log.
	errorLogMax = 300
)

// httpOptions are the flags of serve's HTTP servers.
type httpOptions struct {
	adminListen string        // "" = no admin listener
	idleTimeout time.Duration // keep-alive idle connections
	readTimeout time.Duration // reading a non-websocket request
	maxConns    int           // global cap; 0 = derived from RLIMIT_NOFILE
	maxConnsIP  int           // per client address; 0 = none
}

// publicHandler is what clients reach: the subscribe server's endpoints,
// their /status and /subscribe's refusal without the operator's sections
// and error texts (the subscribe config's PublicStatus, publicStatus),
// /healthz without the fatal error's text.
// Everything else, /metrics, /debug/pprof/ and /admin/ included, is 404.
func (s *server) publicHandler() http.Handler { return s.sub.Handler() }

// adminHandler is the operator's listener.
func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	// What net/http/pprof registers: the index links to every one of them,
	// and `go tool pprof` POSTs to /symbol.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	// Online backup (checkpoint.go).
	mux.Handle("POST "+checkpointPath, http.NewCrossOriginProtection().Handler(s.checkpointEndpoint()))
	// The probes and /status, answered here too, whole: the fatal
	// error's text on /healthz, the whole report on /status.
	mux.Handle("GET /readyz", s.sub.Handler())
	mux.Handle("GET /healthz", s.sub.HealthHandler(false))
	mux.Handle("GET /status", s.sub.StatusHandler(nil))
	return mux
}

// newHTTPServer is an http.Server with serve's timeouts and header limit,
// logging its errors through log at WARN, truncated.
func newHTTPServer(h http.Handler, o httpOptions, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeout, o.readTimeout),
		ReadTimeout:       o.readTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog(log),
	}
}

// errorLog is http.Server's ErrorLog: the process's logger, at WARN, each
// line truncated to errorLogMax bytes (a client controls what it says).
func errorLog(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(truncating{l.Handler()}, slog.LevelWarn)
}

// truncating cuts a record's message to errorLogMax bytes.
type truncating struct{ slog.Handler }

func (t truncating) Handle(ctx context.Context, r slog.Record) error {
	r.Message = loglimit.Clip(r.Message, errorLogMax)
	return t.Handler.Handle(ctx, r)
}

func (t truncating) WithAttrs(as []slog.Attr) slog.Handler {
	return truncating{t.Handler.WithAttrs(as)}
}
func (t truncating) WithGroup(g string) slog.Handler { return truncating{t.Handler.WithGroup(g)} }

// httpServers are serve's running listeners.
type httpServers struct {
	public, admin *http.Server
	publicAddr    net.Addr
	adminAddr     net.Addr // nil without an admin listener
	errc          chan error
}

// listenHTTP opens the public listener (capped) and the admin listener,
// and serves both; a server that stops with an error sends it on errc.
func (s *server) listenHTTP(listen string, o httpOptions, lim connLimits) (*httpServers, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--listen): %w", listen, err)
	}
	hs := &httpServers{errc: make(chan error, 2), publicAddr: ln.Addr()}
	log := s.log.With("component", "http")
	if o.adminListen != "" {
		aln, err := net.Listen("tcp", o.adminListen)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen on %s (--admin-listen; empty disables it): %w", o.adminListen, err)
		}
		hs.adminAddr = aln.Addr()
		hs.admin = newHTTPServer(s.adminHandler(), o, log.With("listener", "admin"))
		go func() { hs.errc <- hs.admin.Serve(aln) }()
	}
	capped := newLimitListener(ln, lim, newConnMetrics(s.reg, lim), log)
	hs.public = newHTTPServer(s.publicHandler(), o, log.With("listener", "public"))
	go func() { hs.errc <- hs.public.Serve(capped) }()
	return hs, nil
}

// shutdown stops both servers, waiting up to d for requests in flight.
func (hs *httpServers) shutdown(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = hs.public.Shutdown(ctx)
	if hs.admin != nil {
		_ = hs.admin.Shutdown(ctx)
	}
}
