package main

// This file owns online backup: `backstream checkpoint --to DIR` and the
// admin endpoint POST /admin/checkpoint?to=DIR that a running serve answers.
//
// The store is held open (Pebble's lock) by the serve process, so a
// checkpoint of a running archive is taken by that process: the CLI calls
// the endpoint on serve's admin listener (--admin-listen, never the public
// one). The endpoint writes to the server's filesystem, so it answers only
// loopback callers whose request did not pass through a proxy, and only
// when serve has a --backup-dir: the destination (relative to it, or
// absolute) must lie under it once symlinks are resolved, must not be an
// existing non-empty directory nor inside the live data dir's store/ or
// scratch/ (archive.Store.Checkpoint), and its volume must have room for
// the whole store above the free-space floor. One checkpoint runs at a
// time (409), none while an earlier one's call on its destination or its
// read-back has not returned (409: a backup volume that stopped answering
// ends the request within --max-write-stall, not the live store), and the
// next may start only --checkpoint-interval after the previous one ended
// (429 with Retry-After). The CLI's flag is
// --admin-listen, so BACKSTREAM_ADMIN_LISTEN set for serve (as in a
// container) points it at the right listener. Without it the CLI
// opens a data dir no process holds and checkpoints it directly; a
// --data-dir on the command line with --admin-listen set is refused, as
// it names a store the CLI would not copy.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/prometheus/client_golang/prometheus"
)

// checkpointPath is the admin endpoint of a running serve.
const checkpointPath = "/admin/checkpoint"

func checkpointCommand() *command {
	return &command{
		name:    "checkpoint",
		summary: "write a consistent copy of the store to a new data dir, through a running serve (--admin-listen) or from a data dir no process holds",
		flags: func(fs *flagSet) {
			fs.String("to", "", "destination: a directory that does not exist or is empty; it becomes a data dir holding store/ (never overwritten). With --admin-listen: relative to serve's --backup-dir, or an absolute path under it")
			fs.String("admin-listen", "", "the --admin-listen address of the running serve that holds the store (serve's default: "+DefaultAdminListen+"; :6009 means this host); empty: open --data-dir directly")
			fs.String("data-dir", "./data", "without --admin-listen: the data dir to copy, which no process may hold open")
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
// The read-back is bounded as the store is (its MaxWriteStall): a read of
// the checkpoint that never returns ends it with its read-stall fault
// (archive.Use), not the process, and leaves the read-only store open on
// the stuck call. readBack is closed once the read-back has ended, its
// store closed: at once when it was not stuck, never if the call never
// returns.
func takeCheckpoint(store *archive.Store, dir string, log *slog.Logger) (res *checkpointResult, readBack <-chan struct{}, err error) {
	released := make(chan struct{})
	start := time.Now()
	if err := store.Checkpoint(dir); err != nil {
		close(released)
		return nil, released, err
	}
	took := time.Since(start)
	// Only do writes r: after a fault it may still be running.
	r := &checkpointResult{To: dir, Store: filepath.Join(dir, archive.StoreDir), Seconds: took.Seconds()}
	opts := archive.Options{ReadOnly: true, FS: store.FS(), Logger: log, CacheSize: 8 << 20,
		MaxWriteStall: store.MaxWriteStall(), Released: func() { close(released) }}
	err = archive.Use(dir, opts, func(ck *archive.Store) error {
		phase, err := ck.Phase()
		if err != nil {
			return err
		}
		r.Phase = string(phase)
		r.TipSeq, err = ck.Tip()
		return err
	})
	switch {
	case err == nil:
		return r, released, nil
	case !archive.OpenFailed(err): // the read's own error, or a disk fault
		return nil, released, fmt.Errorf("checkpoint: read back %s: %w", dir, err)
	}
	return nil, released, fmt.Errorf("checkpoint: written to %s but it does not open: %w", dir, err)
}

// DefaultCheckpointInterval is the least time between the end of one
// checkpoint through the admin endpoint and the start of the next.
const DefaultCheckpointInterval = time.Minute

// checkpointConfig is what serve's flags allow the endpoint.
type checkpointConfig struct {
	backupDir string        // absolute, symlinks resolved; "" = checkpoints refused
	interval  time.Duration // --checkpoint-interval
}

// newCheckpointConfig creates backupDir if needed and resolves it.
func newCheckpointConfig(backupDir string, interval time.Duration) (checkpointConfig, error) {
	c := checkpointConfig{interval: interval}
	if backupDir == "" {
		return c, nil
	}
	dir, err := filepath.Abs(backupDir)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return c, fmt.Errorf("--backup-dir %q: %v", backupDir, err)
	}
	c.backupDir = dir
	return c, nil
}

// checkpointHandler answers POST /admin/checkpoint?to=DIR for a running
// serve.
type checkpointHandler struct {
	checkpointConfig
	store   func() *archive.Store // nil until the store is open
	log     *slog.Logger
	now     func() time.Time
	stat    func(path string) (diskspace.Space, error) // diskspace.Stat
	refused *prometheus.CounterVec
	// failed counts checkpoints that began and failed (500); lastOK is
	// when the last one was written (unix seconds; 0: none since start).
	failed  prometheus.Counter
	lastOK  prometheus.Gauge
	running sync.Mutex // held while a checkpoint runs

	mu         sync.Mutex
	ended      time.Time // when the last checkpoint that wrote anything ended
	stuck      string    // a read-back given up on and still open; "" none
	stuckSince time.Time
	// What /status shows (status): the checkpoint running ("" none) and
	// since when, the last one written (zero: none since the start) and
	// where, the last one that began and failed and its error, cut to
	// checkpointErrorMax bytes.
	runTo    string
	runSince time.Time
	okAt     time.Time
	okTo     string
	failAt   time.Time
	failErr  string
}

// checkpointErrorMax bounds the last failure's error as /status shows it
// (a destination's path is in it, more than once).
const checkpointErrorMax = 500

// statusCheckpoint is the report's "checkpoint" section (serve's /status
// with a --backup-dir): what backstream_checkpoint_failed_total and the
// last success's gauge count, with the state a counter cannot show.
type statusCheckpoint struct {
	BackupDir string `json:"backup_dir"`
	// Running is the checkpoint under way: its destination and since when.
	Running *statusCheckpointCall `json:"running,omitempty"`
	// Stuck is the call of an earlier checkpoint given up on (500) that has
	// not returned (on its destination, or its read-back's read), and
	// since when: no checkpoint starts until it does (409).
	Stuck         *statusCheckpointCall `json:"stuck,omitempty"`
	LastSuccessAt *time.Time            `json:"last_success_at,omitempty"`
	LastSuccessTo string                `json:"last_success_to,omitempty"`
	LastFailureAt *time.Time            `json:"last_failure_at,omitempty"`
	LastError     string                `json:"last_error,omitempty"` // the last failure's, cut to checkpointErrorMax bytes (loglimit.Clip)
}

// statusCheckpointCall is a checkpoint (To) or one of its calls (Call),
// and since when.
type statusCheckpointCall struct {
	To    string    `json:"to,omitempty"`
	Call  string    `json:"call,omitempty"`
	Since time.Time `json:"since"`
}

// status is the report's "checkpoint" section for store (nil before it
// is open); nil without a --backup-dir, where no checkpoint is taken.
func (h *checkpointHandler) status(store *archive.Store) *statusCheckpoint {
	if h.backupDir == "" {
		return nil
	}
	st := &statusCheckpoint{BackupDir: h.backupDir}
	if store != nil {
		if call, since := h.stuckCall(store); call != "" {
			st.Stuck = &statusCheckpointCall{Call: call, Since: since.UTC()}
		}
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runTo != "" {
		st.Running = &statusCheckpointCall{To: h.runTo, Since: h.runSince.UTC()}
	}
	st.LastSuccessAt, st.LastSuccessTo = at(h.okAt), h.okTo
	st.LastFailureAt, st.LastError = at(h.failAt), h.failErr
	return st
}

// Checkpoint refusal reasons (backstream_checkpoint_refused_total).
const (
	ckNoBackupDir = "no_backup_dir"
	ckOutside     = "outside_backup_dir"
	ckRunning     = "running"
	ckInterval    = "interval"
	ckNoSpace     = "no_space"
	ckStuck       = "stuck"
)

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
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backstream_checkpoint_refused_total",
		Help: "Checkpoint requests refused by the admin endpoint, by reason.",
	}, []string{"reason"})
	for _, r := range []string{ckNoBackupDir, ckOutside, ckRunning, ckInterval, ckNoSpace, ckStuck} {
		refused.WithLabelValues(r)
	}
	failed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "backstream_checkpoint_failed_total",
		Help: "Checkpoints that began and failed (answered 500: a destination that failed or stopped answering, a read-back that failed); refusals are backstream_checkpoint_refused_total.",
	})
	lastOK := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "backstream_checkpoint_last_success_timestamp_seconds",
		Help: "When the last checkpoint this process took was written and read back (unix seconds); 0 until one is.",
	})
	if s.reg != nil {
		s.reg.MustRegister(refused, failed, lastOK)
	}
	h := &checkpointHandler{checkpointConfig: s.ck, store: s.openStore, log: log.With("component", "checkpoint"), now: time.Now, stat: diskspace.Stat,
		refused: refused, failed: failed, lastOK: lastOK}
	s.set(func(s *server) { s.ckh = h })
	return h
}

// proxyHeaders mark a request forwarded by a proxy: its loopback source
// address is the proxy's, not the caller's.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"}

// ckRefusal is a checkpoint request the endpoint turns down.
type ckRefusal struct {
	code       int
	reason     string // backstream_checkpoint_refused_total's label; "" = not counted
	msg        string
	retryAfter time.Duration
}

func refuse(code int, reason, format string, args ...any) *ckRefusal {
	return &ckRefusal{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}
}

func answerJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *checkpointHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	store, to, no := h.admit(r)
	if no == nil && !h.running.TryLock() {
		no = refuse(http.StatusConflict, ckRunning, "checkpoint: another checkpoint is running")
	} else if no == nil {
		defer h.running.Unlock()
		no = h.clearToStart(store, to)
	}
	if no != nil {
		if no.reason != "" {
			h.refused.WithLabelValues(no.reason).Inc()
		}
		if no.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(no.retryAfter.Seconds()))))
		}
		answerJSON(w, no.code, checkpointError{Error: no.msg})
		return
	}
	h.mu.Lock()
	h.runTo, h.runSince = to, h.now()
	h.mu.Unlock()
	res, readBack, err := h.checkpoint(store, to)
	h.untilReleased(readBack, "the read-back of "+to)
	refused := errors.Is(err, archive.ErrCheckpointDest) || errors.Is(err, archive.ErrCheckpointNoRoom) // nothing written
	h.mu.Lock()
	h.runTo = ""
	switch now := h.now(); {
	case refused:
	case err != nil:
		h.ended, h.failAt, h.failErr = now, now, loglimit.Clip(err.Error(), checkpointErrorMax)
	default:
		h.ended, h.okAt, h.okTo = now, now, res.To
	}
	h.mu.Unlock()
	switch {
	case errors.Is(err, archive.ErrCheckpointDest):
		answerJSON(w, http.StatusConflict, checkpointError{Error: err.Error()})
	case errors.Is(err, archive.ErrCheckpointNoRoom): // the room went between clearToStart and the start
		h.refused.WithLabelValues(ckNoSpace).Inc()
		answerJSON(w, http.StatusInsufficientStorage, checkpointError{Error: err.Error()})
	case err != nil:
		h.failed.Inc()
		h.log.Error("checkpoint failed", "to", to, "err", err)
		answerJSON(w, http.StatusInternalServerError, checkpointError{Error: err.Error()})
	default:
		h.lastOK.Set(float64(h.now().Unix()))
		h.log.Info("checkpoint written", "to", res.To, "phase", res.Phase, "tip_seq", res.TipSeq, "seconds", res.Seconds)
		answerJSON(w, http.StatusOK, res)
	}
}

// admit checks the caller and the destination: a loopback caller not
// behind a proxy, a --backup-dir, and a destination under it once
// resolved. It returns the open store and the resolved destination.
func (h *checkpointHandler) admit(r *http.Request) (*archive.Store, string, *ckRefusal) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil, "", refuse(http.StatusForbidden, "", "checkpoint: only loopback callers may take a checkpoint (this request came from %s)", r.RemoteAddr)
	}
	for _, hdr := range proxyHeaders {
		if r.Header.Get(hdr) != "" {
			return nil, "", refuse(http.StatusForbidden, "", "checkpoint: refused a request forwarded by a proxy (%s header); call the process directly on loopback", hdr)
		}
	}
	if h.backupDir == "" {
		return nil, "", refuse(http.StatusForbidden, ckNoBackupDir, "checkpoint: this serve has no --backup-dir, so it takes no checkpoints; restart it with --backup-dir DIR")
	}
	to := r.URL.Query().Get("to")
	if to == "" {
		return nil, "", refuse(http.StatusBadRequest, "", "checkpoint: ?to= is required: a path under --backup-dir %s", h.backupDir)
	}
	if !filepath.IsAbs(to) {
		to = filepath.Join(h.backupDir, to)
	}
	to, err = resolveUnder(h.backupDir, filepath.Clean(to))
	if err != nil {
		return nil, "", refuse(http.StatusForbidden, ckOutside, "checkpoint: %v", err)
	}
	store := h.store()
	if store == nil {
		return nil, "", refuse(http.StatusServiceUnavailable, "", "checkpoint: the store is not open yet")
	}
	return store, to, nil
}

// untilReleased refuses checkpoints (clearToStart) until readBack is
// closed, when it is not yet: a read-back given up on a call that never
// returned, its read-only store still open.
func (h *checkpointHandler) untilReleased(readBack <-chan struct{}, what string) {
	select {
	case <-readBack:
		return
	default:
	}
	h.mu.Lock()
	h.stuck, h.stuckSince = what, h.now()
	h.mu.Unlock()
	go func() {
		<-readBack
		h.mu.Lock()
		h.stuck = ""
		h.mu.Unlock()
	}()
}

// stuckCall is the call of an earlier checkpoint given up on and not
// returned yet (its destination's, or its read-back's), and since when;
// "" for none.
func (h *checkpointHandler) stuckCall(store *archive.Store) (string, time.Time) {
	if call, since := store.CheckpointStuck(); call != "" {
		return call, since
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stuck, h.stuckSince
}

// clearToStart checks, with no other checkpoint running, that no earlier
// one is stuck, that the interval since the previous one has passed, that
// to's volume has room, and that the store's has room for the copies the
// checkpoint stages there (archive.Store.RoomToStage).
func (h *checkpointHandler) clearToStart(store *archive.Store, to string) *ckRefusal {
	if call, since := h.stuckCall(store); call != "" {
		return refuse(http.StatusConflict, ckStuck, "checkpoint: an earlier checkpoint is stuck: %s has not returned since %s (its volume stopped answering); none starts until it does: check that volume",
			call, since.UTC().Format(time.RFC3339))
	}
	if wait := h.wait(); wait > 0 {
		no := refuse(http.StatusTooManyRequests, ckInterval, "checkpoint: the previous checkpoint ended less than --checkpoint-interval (%s) ago; retry in %s", h.interval, wait.Round(time.Second))
		no.retryAfter = wait
		return no
	}
	if err := h.roomFor(store.DB().Metrics().DiskSpaceUsage(), to); err != nil {
		return refuse(http.StatusInsufficientStorage, ckNoSpace, "checkpoint: %v", err)
	}
	if err := store.RoomToStage(); err != nil {
		return refuse(http.StatusInsufficientStorage, ckNoSpace, "checkpoint: %v", err)
	}
	return nil
}

// wait is how long the interval still holds the next checkpoint back.
func (h *checkpointHandler) wait() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended.IsZero() {
		return 0
	}
	return h.ended.Add(h.interval).Sub(h.now())
}

// resolveUnder resolves the symlinks of path's longest existing prefix
// (the rest does not exist yet, so it holds none) and refuses a path that
// is not strictly under dir (itself resolved) once they are.
func resolveUnder(dir, path string) (string, error) {
	existing, rest := existingPrefix(path)
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("%s cannot be resolved (a dangling symlink?), so it is not known to be under --backup-dir %s: %w", path, dir, err)
	}
	real = filepath.Join(append([]string{real}, rest...)...)
	if rel, err := filepath.Rel(dir, real); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s (symlinks resolved: %s) is not under --backup-dir %s", path, real, dir)
	}
	return real, nil
}

// existingPrefix splits path into its longest prefix that exists (as a
// name: a symlink counts, dangling or not) and the names below it.
func existingPrefix(path string) (existing string, rest []string) {
	existing = path
	for {
		if _, err := os.Lstat(existing); err == nil {
			return existing, rest
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return existing, rest
		}
		rest = append([]string{filepath.Base(existing)}, rest...)
		existing = parent
	}
}

// roomFor refuses a checkpoint to dir when its volume lacks room for the
// whole store (size bytes: Pebble copies what it cannot hard-link) above
// the volume's free-space floor.
func (h *checkpointHandler) roomFor(size uint64, dir string) error {
	existing, _ := existingPrefix(dir)
	sp, err := h.stat(existing)
	if err != nil {
		return err
	}
	floor := diskspace.Floor(0, sp.Total)
	if sp.Below(size + floor) {
		return fmt.Errorf("not enough space for %s: the store takes %d bytes and %d must stay free, but the volume has %d free", dir, size, floor, sp.Free)
	}
	return nil
}

// checkpoint runs takeCheckpoint, turning a panic (Pebble panics when the
// store is closed under it, as at shutdown) into an error.
func (h *checkpointHandler) checkpoint(store *archive.Store, to string) (res *checkpointResult, readBack <-chan struct{}, err error) {
	defer func() {
		if p := recover(); p != nil {
			done := make(chan struct{})
			close(done)
			res, readBack, err = nil, done, fmt.Errorf("checkpoint: aborted (is the process stopping?): %v", p)
		}
	}()
	return takeCheckpoint(store, to, h.log)
}

func runCheckpoint(ctx context.Context, env *cmdEnv) error {
	to := strings.TrimSpace(env.fs.str("to"))
	if to == "" {
		return fmt.Errorf("%w: --to DIR is required", errUsage)
	}
	listen := strings.TrimSpace(env.fs.str("admin-listen"))
	if listen != "" && env.fs.typed["data-dir"] {
		set := "--admin-listen"
		if v := env.fs.fromEnv["admin-listen"]; v != "" && !env.fs.typed["admin-listen"] {
			set = fmt.Sprintf("%s=%s (--admin-listen; %s= unsets it)", v, listen, v)
		}
		return fmt.Errorf("%w: --data-dir and %s are both set: pass one of them (--admin-listen checkpoints "+
			"the store of the serve answering there, --data-dir one no process holds)", errUsage, set)
	}
	var res *checkpointResult
	var err error
	if listen != "" {
		// A relative --to is relative to serve's --backup-dir.
		res, err = checkpointRemote(ctx, listen, to)
	} else {
		if to, err = filepath.Abs(to); err != nil {
			return fmt.Errorf("%w: --to: %v", errUsage, err)
		}
		res, err = checkpointLocal(env.fs.str("data-dir"), to, archive.Options{Logger: env.log})
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

// checkpointURL is the endpoint of the serve whose admin listener is on
// listen: an empty or wildcard host means this host's loopback.
func checkpointURL(listen, to string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("%w: --admin-listen %q: want host:port or :port (%v)", errUsage, listen, err)
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
		return nil, fmt.Errorf("checkpoint: no backstream serve answers on %s (--admin-listen: serve's admin listener): %w", listen, err)
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
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("checkpoint: %s has no checkpoint endpoint (404): give serve's --admin-listen address, not its public --listen", listen)
		}
		return nil, fmt.Errorf("checkpoint: %s answered %s (is it a backstream serve of this version?): %.200s", listen, resp.Status, body)
	}
	var res checkpointResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("checkpoint: %s answered 200 with an unreadable body: %w", listen, err)
	}
	return &res, nil
}

// checkpointLocal checkpoints a data dir no process holds: opened as serve
// would (scratch/ emptied, staged checkpoints removed, the WAL replayed),
// as Pebble can checkpoint only a read-write open, with opts (its logger;
// tests: its filesystem, its bound). A read or a write of either store that never returns ends it
// with that store's disk fault (useExisting, archive.Use).
func checkpointLocal(dataDir, to string, opts archive.Options) (*checkpointResult, error) {
	// No free-space floor: copying the store off a full volume is how an
	// operator gets out of one.
	opts.CacheSize, opts.MinFree = 8<<20, -1
	var res *checkpointResult
	err := useExisting(dataDir, opts, func(store *archive.Store) (err error) {
		res, _, err = takeCheckpoint(store, to, opts.Logger)
		return err
	})
	switch {
	case err == nil:
		return res, nil
	case !archive.OpenFailed(err): // the checkpoint's own error, or a disk fault
		return nil, err
	case errors.Is(err, archive.ErrLocked):
		return nil, fmt.Errorf("checkpoint: %s is held open by another process (a running backstream serve?): "+
			"checkpoint through it with --admin-listen <its --admin-listen address> (%w)", dataDir, err)
	}
	return nil, fmt.Errorf("checkpoint: %w", err)
}

// useExisting runs do on the store of a data dir opened read-write, for a
// command that works on an existing store (checkpoint, compaction reset),
// never creating one: it first opens it read-only, which refuses a
// missing, empty or unidentified store ("no store here") and a held one
// without writing anything. Both opens, and do, run under archive.Use: a
// read or a write of the store that never returns ends the command with
// the store's disk fault (a *archive.FatalError: exit 2) once it has been
// out for MaxWriteStall, the call left blocked on a goroutine of its own.
func useExisting(dataDir string, opts archive.Options, do func(*archive.Store) error) error {
	ro := opts
	ro.ReadOnly, ro.CacheSize = true, 8<<20
	if err := archive.Use(dataDir, ro, func(*archive.Store) error { return nil }); err != nil {
		return err
	}
	return archive.Use(dataDir, opts, do)
}
