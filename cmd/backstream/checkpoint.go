package main

// This file owns online backup: `backstream checkpoint --to DIR` and the
// admin endpoint POST /admin/checkpoint?to=DIR that a running serve answers.
//
// The store is held open (Pebble's lock) by the serve process, so a
// checkpoint of a running archive is taken by that process: the CLI calls
// the endpoint on serve's --listen address. The endpoint writes to the
// server's filesystem, so it answers only loopback callers whose request did
// not pass through a proxy, takes only an absolute path, and never writes
// into an existing non-empty directory or inside the live data dir's store/
// or scratch/ (archive.Store.Checkpoint). Without --listen the CLI opens a
// data dir no process holds and checkpoints it directly.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
)

// checkpointPath is the admin endpoint of a running serve.
const checkpointPath = "/admin/checkpoint"

func checkpointCommand() *command {
	return &command{
		name:    "checkpoint",
		summary: "write a consistent copy of the store to a new data dir, through a running serve (--listen) or from a data dir no process holds",
		flags: func(fs *flagSet) {
			fs.String("to", "", "destination: a directory that does not exist or is empty; it becomes a data dir holding store/ (never overwritten)")
			fs.String("listen", "", "the --listen address of the running serve that holds the store (:6008 means this host); empty: open --data-dir directly")
			fs.String("data-dir", "./data", "without --listen: the data dir to copy, which no process may hold open")
			fs.Bool("json", false, "print the result as JSON")
		},
		run: runCheckpoint,
	}
}

// checkpointResult is what a checkpoint reports (the endpoint's 200 body,
// and `backstream checkpoint --json`): read back from the checkpoint itself.
type checkpointResult struct {
	To      string  `json:"to"`      // the new data dir
	Store   string  `json:"store"`   // <to>/store
	Phase   string  `json:"phase"`   // the checkpoint's phase
	TipSeq  uint64  `json:"tip_seq"` // the checkpoint's last archived seq
	Seconds float64 `json:"seconds"` // time the checkpoint took
}

// checkpointError is the endpoint's body for every non-200 answer.
type checkpointError struct {
	Error string `json:"error"`
}

// takeCheckpoint checkpoints store to dir and reads the result back from the
// checkpoint, opened read-only, so what it reports is what a restore gets.
func takeCheckpoint(store *archive.Store, dir string, log *slog.Logger) (*checkpointResult, error) {
	start := time.Now()
	if err := store.Checkpoint(dir); err != nil {
		return nil, err
	}
	took := time.Since(start)
	ck, err := archive.Open(dir, archive.Options{ReadOnly: true, Logger: log, CacheSize: 8 << 20})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: written to %s but it does not open: %w", dir, err)
	}
	defer ck.Close()
	res := &checkpointResult{To: dir, Store: filepath.Join(dir, archive.StoreDir), Seconds: took.Seconds()}
	phase, err := ck.Phase()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read back %s: %w", dir, err)
	}
	res.Phase = string(phase)
	if res.TipSeq, err = ck.Tip(); err != nil {
		return nil, fmt.Errorf("checkpoint: read back %s: %w", dir, err)
	}
	return res, nil
}

// checkpointHandler answers POST /admin/checkpoint?to=DIR for a running
// serve. One checkpoint runs at a time.
type checkpointHandler struct {
	store func() *archive.Store // nil until the store is open
	log   *slog.Logger
	mu    sync.Mutex
}

// openStore is the store of a running serve, nil before it is open.
func (s *server) openStore() *archive.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store
}

// checkpointEndpoint is the handler serve mounts on POST /admin/checkpoint.
func (s *server) checkpointEndpoint() http.Handler {
	log := s.log
	if log == nil { // tests build a server without one
		log = slog.New(slog.DiscardHandler)
	}
	return &checkpointHandler{store: s.openStore, log: log.With("component", "checkpoint")}
}

// proxyHeaders mark a request forwarded by a proxy: its loopback source
// address is the proxy's, not the caller's.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"}

func (h *checkpointHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	answer := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(code int, format string, args ...any) {
		answer(code, checkpointError{Error: fmt.Sprintf(format, args...)})
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fail(http.StatusForbidden, "checkpoint: only loopback callers may take a checkpoint (this request came from %s)", r.RemoteAddr)
		return
	}
	for _, hdr := range proxyHeaders {
		if r.Header.Get(hdr) != "" {
			fail(http.StatusForbidden, "checkpoint: refused a request forwarded by a proxy (%s header); call the process directly on loopback", hdr)
			return
		}
	}
	to := r.URL.Query().Get("to")
	if to == "" || !filepath.IsAbs(to) {
		fail(http.StatusBadRequest, "checkpoint: ?to= must be an absolute path on the server, got %q", to)
		return
	}
	to = filepath.Clean(to)
	store := h.store()
	if store == nil {
		fail(http.StatusServiceUnavailable, "checkpoint: the store is not open yet")
		return
	}
	if !h.mu.TryLock() {
		fail(http.StatusConflict, "checkpoint: another checkpoint is running")
		return
	}
	defer h.mu.Unlock()
	res, err := h.checkpoint(store, to)
	switch {
	case errors.Is(err, archive.ErrCheckpointDest):
		fail(http.StatusConflict, "%v", err)
	case err != nil:
		h.log.Error("checkpoint failed", "to", to, "err", err)
		fail(http.StatusInternalServerError, "%v", err)
	default:
		h.log.Info("checkpoint written", "to", res.To, "phase", res.Phase, "tip_seq", res.TipSeq, "seconds", res.Seconds)
		answer(http.StatusOK, res)
	}
}

// checkpoint runs takeCheckpoint, turning a panic (Pebble panics when the
// store is closed under it, as at shutdown) into an error.
func (h *checkpointHandler) checkpoint(store *archive.Store, to string) (res *checkpointResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("checkpoint: aborted (is the process stopping?): %v", p)
		}
	}()
	return takeCheckpoint(store, to, h.log)
}

func runCheckpoint(ctx context.Context, env *cmdEnv) error {
	to := strings.TrimSpace(env.fs.str("to"))
	if to == "" {
		return fmt.Errorf("%w: --to DIR is required", errUsage)
	}
	to, err := filepath.Abs(to)
	if err != nil {
		return fmt.Errorf("%w: --to: %v", errUsage, err)
	}
	var res *checkpointResult
	if listen := strings.TrimSpace(env.fs.str("listen")); listen != "" {
		res, err = checkpointRemote(ctx, listen, to)
	} else {
		res, err = checkpointLocal(env.fs.str("data-dir"), to, env.log)
	}
	if err != nil {
		return err
	}
	if env.fs.get("json").(bool) {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(env.stdout, "checkpoint written to %s in %.1fs: phase %s, archive tip seq %d\n", res.Store, res.Seconds, res.Phase, res.TipSeq)
	fmt.Fprintf(env.stdout, "restore: stop backstream and start it with --data-dir %s (or move %s into place as <data-dir>/store)\n", res.To, res.Store)
	return nil
}

// checkpointURL is the endpoint of the serve listening on listen: an empty
// or wildcard host means this host's loopback.
func checkpointURL(listen, to string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("%w: --listen %q: want host:port or :port (%v)", errUsage, listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + checkpointPath + "?to=" + url.QueryEscape(to), nil
}

// checkpointRemote asks the serve on listen to checkpoint its store to to.
// Interrupting the CLI does not stop a checkpoint the server has begun.
func checkpointRemote(ctx context.Context, listen, to string) (*checkpointResult, error) {
	u, err := checkpointURL(listen, to)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: no backstream serve answers on %s (--listen): %w", listen, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read the answer of %s: %w", listen, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e checkpointError
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("checkpoint: %s answered %s: %s", listen, resp.Status, e.Error)
		}
		return nil, fmt.Errorf("checkpoint: %s answered %s (is it a backstream serve of this version?): %.200s", listen, resp.Status, body)
	}
	var res checkpointResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("checkpoint: %s answered 200 with an unreadable body: %w", listen, err)
	}
	return &res, nil
}

// checkpointLocal checkpoints a data dir no process holds. It first opens
// the store read-only, which refuses a missing, empty or unidentified store
// and a held one without writing anything; Pebble can checkpoint only a
// read-write open, which it then does (as serve would: scratch/ emptied,
// the WAL replayed).
func checkpointLocal(dataDir, to string, log *slog.Logger) (*checkpointResult, error) {
	ro, err := archive.Open(dataDir, archive.Options{ReadOnly: true, Logger: log, CacheSize: 8 << 20})
	if err != nil {
		if errors.Is(err, archive.ErrLocked) {
			return nil, fmt.Errorf("checkpoint: %s is held open by another process (a running backstream serve?): "+
				"checkpoint through it with --listen <its --listen address> (%w)", dataDir, err)
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := ro.Close(); err != nil {
		return nil, fmt.Errorf("checkpoint: close %s: %w", dataDir, err)
	}
	store, err := archive.Open(dataDir, archive.Options{Logger: log, CacheSize: 8 << 20})
	if err != nil {
		if errors.Is(err, archive.ErrLocked) {
			return nil, fmt.Errorf("checkpoint: %s was taken by another process meanwhile: checkpoint through it with --listen (%w)", dataDir, err)
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer store.Close()
	return takeCheckpoint(store, to, log)
}
