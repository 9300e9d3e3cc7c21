package main

// This file owns `backstream serve`: open the store, answer /metrics and
// /status from the first second, and run the lifecycle. (Skeleton: the
// bootstrap and lifecycle issues fill in the phases.)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func serveCommand() *command {
	return &command{
		name:    "serve",
		summary: "bootstrap from a relay, then archive its firehose and serve clients",
		flags: func(fs *flagSet) {
			fs.String("relay", "https://relay1.us-east.bsky.network", "relay URL")
			fs.String("data-dir", "./data", "data directory (holds store/ and scratch/)")
			fs.String("listen", ":6008", "HTTP listen address for /subscribe, /status, /metrics")
		},
		run: runServe,
	}
}

// server is the running process: the store, the metrics registry and the
// HTTP endpoints.
type server struct {
	store *archive.Store
	reg   *prometheus.Registry
	log   *logger
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "backstream_build_info",
		Help:        "Always 1; labels describe the build.",
		ConstLabels: prometheus.Labels{"version": version()},
	}, func() float64 { return 1 }))
	return reg
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /status", s.handleStatus)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	return mux
}

// handleStatus always answers 200 with the status report (an error is
// reported inside it, never as a failed request).
func (s *server) handleStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	rep, err := buildStatus(s.store)
	var body any = rep
	if err != nil {
		body = map[string]string{"error": err.Error()}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body)
}

func runServe(ctx context.Context, env *cmdEnv) error {
	dir := env.fs.str("data-dir")
	store, err := archive.Open(dir, archive.Options{Logger: env.log})
	if err != nil {
		return err
	}
	defer store.Close()
	s := &server{store: store, reg: newRegistry(), log: env.log}

	ln, err := net.Listen("tcp", env.fs.str("listen"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", env.fs.str("listen"), err)
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	env.log.Info("serving", "listen", ln.Addr().String(), "data_dir", dir)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
