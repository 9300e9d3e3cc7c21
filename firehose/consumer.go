package firehose

// consumer.go owns the Consumer: its configuration, the per-frame step
// (Handle), the connection loop with reconnects (Run), and the cursor state
// (last accepted in memory, last durable from the writer's receipts).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/upstream"
)

// Mode says which writer a consumer feeds and whether units carry repo side
// effects.
type Mode uint8

const (
	// ModeCapture feeds the capture writer (archive.WriterOptions{Capture:
	// true}): rows and cursor/relay only, no repo mutations (merge applies
	// the side effects later, M8).
	ModeCapture Mode = 1
	// ModeLive feeds the archive writer: each #account/#sync row's unit also
	// carries its conditional repo mutation (Effects).
	ModeLive Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeCapture:
		return "capture"
	case ModeLive:
		return "live"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// DefaultIdleTimeout is how long a connection may stay silent (no message,
// no pong) before it is dropped and redialed. Pings go out every third of it.
const DefaultIdleTimeout = 60 * time.Second

// Config configures a Consumer.
type Config struct {
	// Relay is the relay base URL (http(s)://, ws(s):// or a bare host).
	Relay string
	// Writer receives one unit per processed frame. ModeCapture needs the
	// capture writer, ModeLive the archive writer.
	Writer *archive.Writer
	Mode   Mode
	// Cursor is where to start: nil = the live tip (no cursor parameter);
	// N = every event with seq > N. It is taken to be durable already (the
	// value read from cursor/relay), so Started is closed at once when set.
	Cursor *int64
	// ReadLimit bounds one websocket message (<= 0: upstream.DefaultFirehoseReadLimit).
	ReadLimit int64
	// BackoffMin and BackoffMax bound the reconnect delay (defaults 250 ms, 30 s).
	BackoffMin, BackoffMax time.Duration
	// IdleTimeout drops a connection silent for this long (default 60 s).
	IdleTimeout time.Duration
	Metrics     *Metrics
	Logger      *slog.Logger
	// Now is the clock for side effects' NextAttemptUS (default time.Now).
	Now func() time.Time
	// Crash, when armed (tests), kills the process right after a live
	// unit is durable (crashpoint.LiveBatch). Nil in production.
	Crash *crashpoint.Set
	// Identity, when set and not in ident.ModeOff, verifies every #commit
	// and #sync against the account's DID document (verify.go); #identity
	// frames invalidate its cached document. Strict mode drops a failing
	// frame's rows (its cursor still advances) and, live, marks the account
	// due for a whole-repo replacement; warn mode counts and archives.
	Identity *ident.Resolver
	// MarkWriter (capture mode) is the archive writer, where a frame that
	// failed verification marks its account due for a replacement (capture
	// units carry no repo mutations); nil: not marked.
	MarkWriter *archive.Writer
	// OnEffects, when set (live mode), is called after a unit carrying repo
	// side effects (#account, #sync) is durable, so the retry runner can
	// look for newly due repos at once (retry.Runner.Wake). It must not
	// block.
	OnEffects func()
	// GapIDs hands out the ids of the gap/ rows this consumer records
	// (nil: ids from 1, for a store without gaps).
	GapIDs *archive.GapIDs
	// Store (live mode) is the archive whose revs tell a #commit or #sync
	// below the window of recently accepted frames (checkSeq) a new event,
	// not a duplicate: its rev is newer than the account's archived one.
	// Nil: every frame below the window is a duplicate.
	Store *archive.Store
	// GapThreshold is the largest seq skip counted only as an anomaly
	// (default DefaultGapThreshold; a larger one is a gap).
	GapThreshold int64
	// Verifiers is how many frames Run checks in parallel when Identity
	// verifies (pipeline.go); 0: Identity.Verifiers().
	Verifiers int
	// Uncovered says the archive already holds work no firehose position
	// covers (accounts downloaded while the relay sent nothing:
	// meta/relay_silent_at): the first frame accepted without a position
	// records a no_cursor gap (see Uncover).
	Uncovered bool
	// UninvertedInterval is the least time between an account's last
	// completed snapshot and the replacement a #commit archived without
	// the sync 1.1 inversion schedules (verify.go's uninvertedEffect);
	// <= 0: DefaultUninvertedInterval.
	UninvertedInterval time.Duration
}

// DefaultUninvertedInterval: a #commit that cannot be inverted (no
// prevData, a legacy op) schedules its account's replacement no sooner
// than a day after its last completed snapshot, so an account whose PDS
// never sends prevData costs at most one download a day, while a delete a
// relay hid is gone from the archive within a day.
const DefaultUninvertedInterval = 24 * time.Hour

// Consumer reads subscribeRepos and submits one archive.Unit per frame. Run
// drives it; Handle is its synchronous step.
type Consumer struct {
	cfg     Config
	log     *slog.Logger
	lines   *loglimit.Every // rate-limited lines (the verification window, the relay's error and info frames)
	m       *Metrics
	acks    *archive.Acks
	running atomic.Bool
	submit  func(context.Context, *archive.Unit) error // Writer.Submit; tests wrap it to see units
	mark    func(context.Context, *archive.Unit) error // MarkWriter.Submit (capture mode); tests wrap it to count marks

	// Owned by the goroutine calling Handle (Run's).
	chain *capturedChain // capture mode with a MarkWriter: each account's last captured rev

	hasPos bool  // a resume position exists (Config.Cursor or an accepted frame)
	last   int64 // last accepted seq
	below  int64 // frames below the last accepted seq since one passed, on this connection
	// recent is the window of the frames accepted under the last seqs
	// (recentFrame, at seq % its length: GapThreshold, maxRecentFrames at
	// most), so a frame below the last accepted seq is told a duplicate
	// from a late frame or a new one under an old seq (checkSeq); floor
	// is the seq at or below which this consumer saw nothing (its start
	// cursor, or before a new sequence's first frame).
	recent  []recentFrame
	floor   int64
	seed    maphash.Seed
	pending *pendingGap

	// lastEventUS is the upstream time of the last accepted event, or
	// when Run started before any (unix µs): how far behind the relay the
	// archive is (Behind).
	lastEventUS atomic.Int64
	// acceptedUS is when the last frame was accepted (Now, unix µs).
	acceptedUS atomic.Int64

	lastAccepted atomic.Int64
	lastDurable  atomic.Int64
	outdated     atomic.Bool

	started     chan struct{}
	startedOnce sync.Once

	// The time without a position nor a connection once work needs a
	// position (Uncover): owes, such work exists; connected, a connection
	// is open; hole, the consumer was without a connection while it owed
	// (noted by its next dial without a position: noteHole).
	owes, connected, hole atomic.Bool

	mu   sync.Mutex // guards the receipt drain, fatal and abort
	rcpt []archive.Receipt
	// effectSeqs are submitted units with side effects, not yet durable
	// (guarded by mu; only used with OnEffects).
	effectSeqs map[int64]struct{}
	fatal      error
	abort      context.CancelFunc // cancels the active Run
}

// New validates cfg and returns a Consumer; nothing starts until Run.
func New(cfg Config) (*Consumer, error) {
	switch {
	case cfg.Relay == "":
		return nil, fmt.Errorf("firehose: new: %w: no relay", ErrConfig)
	case cfg.Writer == nil:
		return nil, fmt.Errorf("firehose: new: %w: no writer", ErrConfig)
	case cfg.Mode != ModeCapture && cfg.Mode != ModeLive:
		return nil, fmt.Errorf("firehose: new: %w: mode %d", ErrConfig, cfg.Mode)
	case cfg.Cursor != nil && *cfg.Cursor < 0:
		return nil, fmt.Errorf("firehose: new: %w: negative cursor %d", ErrConfig, *cfg.Cursor)
	case cfg.BackoffMin < 0 || cfg.BackoffMax < 0 || cfg.IdleTimeout < 0:
		return nil, fmt.Errorf("firehose: new: %w: negative duration", ErrConfig)
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = cfg.BackoffMin
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.GapIDs == nil {
		cfg.GapIDs = new(archive.GapIDs)
		cfg.GapIDs.Next() // ids start at 1
	}
	if cfg.UninvertedInterval <= 0 {
		cfg.UninvertedInterval = DefaultUninvertedInterval
	}
	if cfg.GapThreshold <= 0 {
		cfg.GapThreshold = DefaultGapThreshold
	}
	c := &Consumer{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "firehose", "mode", cfg.Mode.String()),
		lines:      loglimit.New(time.Minute, cfg.Now),
		m:          cfg.Metrics,
		acks:       archive.NewAcks(),
		started:    make(chan struct{}),
		effectSeqs: make(map[int64]struct{}),
	}
	c.submit = cfg.Writer.Submit
	c.recent = make([]recentFrame, min(cfg.GapThreshold, maxRecentFrames))
	c.seed = maphash.MakeSeed()
	if cfg.Mode == ModeCapture && cfg.MarkWriter != nil {
		c.chain = newCapturedChain(DefaultChainAccounts)
		c.mark = cfg.MarkWriter.Submit
	}
	if cfg.Uncovered {
		c.owes.Store(true)
		c.hole.Store(true)
	}
	if cfg.Cursor != nil {
		c.hasPos, c.last, c.floor = true, *cfg.Cursor, *cfg.Cursor
		c.lastAccepted.Store(c.last)
		c.lastDurable.Store(c.last)
		c.m.durable(c.last)
		c.startedOnce.Do(func() { close(c.started) })
	}
	return c, nil
}

// LastAccepted is the last upstream seq submitted to the writer (Config.Cursor
// before any; 0 when neither). Reconnects resume from it.
func (c *Consumer) LastAccepted() int64 { return c.lastAccepted.Load() }

// LastDurable is the durable cursor/relay as the writer's last receipt
// says (Config.Cursor before any; 0 when neither): every frame up to it is
// durable. After the relay restarted its sequence it stays in the old
// sequence until the reset is written (archive.SeqCursor.Reset), then goes
// back into the new one.
func (c *Consumer) LastDurable() int64 {
	c.collect()
	return c.lastDurable.Load()
}

// Behind is how far the archive is behind the relay as this consumer
// knows it: now less the upstream time of the last accepted event (or the
// time Run started, before any). A relay that refuses every cursor, or a
// connection that never delivers, makes it grow.
func (c *Consumer) Behind() time.Duration {
	since := c.lastEventUS.Load()
	if since == 0 {
		return 0 // not running yet
	}
	return max(0, c.cfg.Now().Sub(time.UnixMicro(since)))
}

// AcceptedSince reports whether a frame was accepted at or after us (unix
// µs): the stream has resumed after a gap found then, so a repair pass that
// lists the relay now misses nothing the stream will not bring.
func (c *Consumer) AcceptedSince(us int64) bool { return c.acceptedUS.Load() >= us }

// Started is closed once a starting cursor is durable: at New when
// Config.Cursor is set, otherwise when the first frame's unit is durable
// (M1: bootstrap dispatches no getRepo before).
func (c *Consumer) Started() <-chan struct{} { return c.started }

// OutdatedCursor reports whether the relay said #info OutdatedCursor: events
// between the cursor and its oldest retained one were missed.
func (c *Consumer) OutdatedCursor() bool { return c.outdated.Load() }

// Uncover says work that needs a firehose position begins now (bootstrap
// downloads after capture's wait expired with no frame): the connection
// open now, if any, covers it while it lasts; any time without one until
// the consumer has a position is a hole in the archive, noted by the next
// dial and recorded as a no_cursor gap with the first frame accepted (one
// gap, whatever the reconnects). In live mode the first connection does
// the same of itself. Safe to call while Run runs.
func (c *Consumer) Uncover() {
	c.owes.Store(true)
	if !c.connected.Load() {
		c.hole.Store(true)
	}
}

// Owing reports, once Run has returned, a hole (see Uncover) not recorded:
// the consumer stopped without a position, before any frame. Whoever
// follows the relay next must record it.
func (c *Consumer) Owing() bool {
	return c.hole.Load() && !c.hasPos && (c.pending == nil || !c.pending.recorded)
}

// Err is the fatal error that stopped (or will stop) Run: a refused unit.
// Writer failures are returned by Run and Handle directly.
func (c *Consumer) Err() error {
	c.collect()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// collect drains the receipt mailbox: durable units move LastDurable and
// close Started; a refused unit (or a receipt whose token is not a seq, a
// bug) is fatal and aborts the active Run. It drains with Acks.Drain, not
// Acks.Wait: Run's listener and the synchronous callers (LastDurable, Err)
// both drain, and only draining under c.mu keeps the receipts in commit
// order, so progress is never reported past a refused unit.
func (c *Consumer) collect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rcpt = c.acks.Drain(c.rcpt[:0])
	wake := false
	for i := range c.rcpt {
		r := &c.rcpt[i]
		seq, err := archive.TokenOf[int64](*r)
		switch {
		case err != nil:
			c.stop(fmt.Errorf("firehose: %w", err))
			continue
		case r.Refused != nil:
			c.stop(fmt.Errorf("firehose: seq %d: %w: %v", seq, ErrUnitRefused, r.Refused))
			continue
		}
		if c.fatal != nil {
			continue // never report progress past a hole
		}
		// The durable cursor, not the unit's own seq: a unit of an account
		// held by a replacement may still wait behind this one. Receipts
		// come in commit order, and the writer's cursor only goes back
		// once a reset is written, so the last one is the durable cursor.
		// 0 is a unit without a cursor (a gap row recorded at once): a
		// written cursor is never 0 after any other.
		if d := int64(r.Cursor); d != 0 {
			c.lastDurable.Store(d)
			c.m.durable(d)
		}
		c.startedOnce.Do(func() { close(c.started) })
		if c.cfg.Mode == ModeLive {
			c.cfg.Crash.Hit(crashpoint.LiveBatch) // live rows with cursor/relay are durable
		}
		if _, ok := c.effectSeqs[seq]; ok {
			delete(c.effectSeqs, seq)
			wake = true
		}
	}
	clear(c.rcpt)
	if wake {
		c.cfg.OnEffects()
	}
}

// stop makes err the consumer's fatal error (the first one wins) and aborts
// the active Run. c.mu is held.
func (c *Consumer) stop(err error) {
	if c.fatal != nil {
		return
	}
	c.fatal = err
	c.log.Error("firehose: a unit's receipt is fatal; stopping", "err", err)
	if c.abort != nil {
		c.abort()
	}
}

func (c *Consumer) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// writerErr is non-nil once the writer has stopped.
func (c *Consumer) writerErr() error {
	select {
	case <-c.cfg.Writer.Done():
		err := c.cfg.Writer.Err()
		if err == nil {
			err = archive.ErrClosed
		}
		return fmt.Errorf("firehose: writer stopped: %w", err)
	default:
		return nil
	}
}

// Handle processes one binary websocket message: decode, validate, and (for
// a frame with a seq above the last accepted one) submit one unit holding
// its rows and cursor/relay = its seq. Frames that cannot be used are
// counted and skipped. It returns an error only when the unit could not be
// submitted (ctx done, writer stopped) or an earlier unit was refused; the
// frame is then not accepted. Handle keeps no reference to msg, so the
// caller may reuse it. Not safe for concurrent use, nor alongside Run.
func (c *Consumer) Handle(ctx context.Context, msg []byte) error {
	if err := c.failed(); err != nil {
		return err
	}
	f, err := upstream.DecodeFrame(msg)
	return c.handleFrame(ctx, &f, err, nil)
}

// handleFrame is Handle after decoding (err is DecodeFrame's). v is the
// frame's verdict when it was checked ahead (pipeline.go); nil checks it
// here, once the seq rules have accepted it.
func (c *Consumer) handleFrame(ctx context.Context, f *upstream.Frame, err error, v *verdict) error {
	switch {
	case errors.Is(err, upstream.ErrUnknownFrameType):
		c.m.frame(frameUnknown)
		c.m.anomaly(AnomalyUnknownType)
		return nil
	case err != nil:
		c.m.frame(frameInvalid)
		c.m.anomaly(AnomalyUndecodable)
		return nil
	}
	switch {
	case f.Error != nil:
		return c.handleErrorFrame(ctx, f.Error)
	case f.Info != nil:
		c.handleInfoFrame(f.Info.Name)
		return nil
	}
	seq, _ := f.Seq()
	c.m.frame(frameType(f))
	if seq <= 0 {
		c.m.anomaly(AnomalyInvalidSeq)
		return nil
	}
	rule, err := c.checkSeq(f, seq)
	if err != nil || rule == seqDrop {
		return err
	}
	if v == nil {
		v = &verdict{}
		*v = c.check(ctx, f, nil, c.cfg.Identity.Now())
	}
	failed, err := c.judge(v)
	if err != nil {
		return err
	}
	if v.uninverted && failed == "" {
		c.m.anomaly(AnomalyUninverted)
	}
	if err := c.markCaptured(ctx, f, v, failed); err != nil {
		return err
	}
	if err := c.checkChain(ctx, f); err != nil {
		return err
	}
	u := c.unit(f, seq, failed, v.uninverted)
	if rule == seqNewer {
		rule = c.followNewer(seq, len(u.Events) > 0)
	}
	if rule == seqLate {
		err = c.submitLate(ctx, u, seq)
	} else {
		err = c.submitWithGap(ctx, u, seq)
	}
	if err != nil {
		if werr := c.writerErr(); werr != nil {
			return werr
		}
		return fmt.Errorf("firehose: submit seq %d: %w", seq, err)
	}
	if rule == seqLate {
		c.remember(f, seq)
		c.acceptedLate(f)
		return nil
	}
	c.accepted(f, seq)
	c.remember(f, seq)
	return nil
}

// acceptedLate notes the late frame f submitted. The position stays.
// Behind comes forward to f's upstream time when it is later than the
// last accepted event's: a relay gone back in its sequence sends its new
// events under seqs below the position, and the archive holds the relay's
// stream up to them (what it missed is the gap's); a frame delivered out
// of order is older and leaves Behind where it is.
func (c *Consumer) acceptedLate(f *upstream.Frame) {
	now := c.cfg.Now().UnixMicro()
	t := min(int64(eventTime(f, c.cfg.Now)*1e6), now)
	for {
		cur := c.lastEventUS.Load()
		if t <= cur || c.lastEventUS.CompareAndSwap(cur, t) {
			break
		}
	}
	c.acceptedUS.Store(now)
}

// accepted moves the consumer's position to seq, whose frame f is
// submitted.
func (c *Consumer) accepted(f *upstream.Frame, seq int64) {
	c.hasPos, c.last = true, seq
	c.lastAccepted.Store(seq)
	if c.pending != nil {
		c.gapRecorded()
	}
	t := eventTime(f, c.cfg.Now)
	c.m.accepted(seq, t)
	now := c.cfg.Now().UnixMicro()
	c.lastEventUS.Store(min(int64(t*1e6), now))
	c.acceptedUS.Store(now)
}

// handleErrorFrame counts and logs the relay's error frame e; a
// FutureCursor, once the consumer has a position, records a gap and
// follows the relay's live tip.
func (c *Consumer) handleErrorFrame(ctx context.Context, e *upstream.ErrorFrame) error {
	c.m.frame(frameError)
	kind := AnomalyErrorFrame
	switch e.Error {
	case "FutureCursor":
		kind = AnomalyFutureCursor
	case "ConsumerTooSlow":
		kind = AnomalyConsumerTooSlow
	}
	c.m.anomaly(kind)
	// A relay may repeat it on every frame.
	c.lines.Log(c.log, slog.LevelWarn, kind, "firehose: relay sent an error frame", "error", loglimit.Clip(e.Error, 64),
		"message", loglimit.Clip(e.Message, 256), "cursor", c.LastAccepted())
	if kind != AnomalyFutureCursor || !c.hasPos {
		return nil
	}
	// The relay's sequence is behind ours: it was rebuilt or replaced.
	// Follow its live tip; the first frame's unit records the gap and
	// resets cursor/relay.
	c.noteGap(archive.GapFutureCursor, true)
	if err := c.recordNow(ctx); err != nil {
		return err
	}
	c.hasPos = false
	return nil
}

// handleInfoFrame counts the relay's info frame of that name; an
// OutdatedCursor records a gap: events were missed.
func (c *Consumer) handleInfoFrame(name string) {
	c.m.frame(frameInfo)
	if name != "OutdatedCursor" {
		return
	}
	c.outdated.Store(true)
	c.m.outdatedCursor()
	c.m.anomaly(AnomalyOutdatedCursor)
	c.lines.Log(c.log, slog.LevelError, AnomalyOutdatedCursor, "firehose: relay says our cursor is outdated: events were missed",
		"cursor", c.LastAccepted())
	c.noteGap(archive.GapOutdatedCursor, false)
}

// unit builds the unit of one seq'd frame: its valid rows, their side
// effects (live mode), and cursor/relay in the same unit (C1). A frame that
// failed verification (failed names the outcome) has no rows; live, it
// marks its account due for a replacement, and a #commit archived without
// being inverted (uninverted) schedules one (uninvertedEffect).
func (c *Consumer) unit(f *upstream.Frame, seq int64, failed string, uninverted bool) *archive.Unit {
	u := &archive.Unit{
		Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: uint64(seq)}, // seq > 0
		Token:  seq,
		Acks:   c.acks,
	}
	if failed == "" {
		u.Events = Rows(f, seq, c.m)
		if cm := f.Commit; cm != nil && len(u.Events) > 0 && cm.Since != nil && upstream.ValidTID(*cm.Since) {
			u.Events[0].Since = *cm.Since // the writer's chain check, live or when merged
		}
	}
	if c.cfg.Mode == ModeLive {
		now := c.cfg.Now().UnixMicro()
		did := f.DID()
		if failed != "" && upstream.ValidDID(did) {
			u.Repos = append(u.Repos, unverifiedEffect(did, now))
		}
		for i := range u.Events {
			if up := Effects(&u.Events[i], now); up != nil {
				u.Repos = append(u.Repos, *up)
			}
		}
		if len(u.Repos) > 0 && c.cfg.OnEffects != nil {
			c.mu.Lock()
			c.effectSeqs[seq] = struct{}{}
			c.mu.Unlock()
		}
		// Not a wake: an account whose PDS sends legacy commits sends
		// nothing else, its marks are mostly due later, and a wake per
		// commit would run retry passes back to back; the retry runner's
		// next scan finds the marks due now.
		if failed == "" && uninverted && upstream.ValidDID(did) {
			u.Repos = append(u.Repos, c.uninvertedEffect(did))
		}
	}
	return u
}

func frameType(f *upstream.Frame) string {
	switch {
	case f.Commit != nil:
		return frameCommit
	case f.Sync != nil:
		return frameSync
	case f.Identity != nil:
		return frameIdentity
	case f.Account != nil:
		return frameAccount
	}
	return frameUnknown
}

// eventTime is the frame's upstream time in unix seconds, or now when it
// does not parse.
func eventTime(f *upstream.Frame, now func() time.Time) float64 {
	t, err := time.Parse(time.RFC3339Nano, eventTimeString(f))
	if err != nil {
		t = now()
	}
	return float64(t.UnixNano()) / 1e9
}

// eventTimeString is the frame's upstream time as the relay wrote it.
func eventTimeString(f *upstream.Frame) string {
	switch {
	case f.Commit != nil:
		return f.Commit.Time
	case f.Sync != nil:
		return f.Sync.Time
	case f.Identity != nil:
		return f.Identity.Time
	case f.Account != nil:
		return f.Account.Time
	}
	return ""
}

// resumeCursor is the cursor for the next dial: the last accepted seq, or
// nil (live tip) when there is no position yet.
func (c *Consumer) resumeCursor() *int64 {
	if !c.hasPos {
		return nil
	}
	v := c.last
	return &v
}

// fatalError marks errors that end Run (writer stopped, unit refused).
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Run consumes the firehose until ctx is done (it then returns nil) or a
// fatal error: the writer stopped (its error, or archive.ErrClosed) or
// refused a unit (ErrUnitRefused). Upstream trouble (dial errors, close
// frames, read errors, error frames, idle connections) only reconnects,
// with capped, jittered exponential backoff, resuming from LastAccepted.
// Run returns only after every goroutine it started has stopped. Units
// already submitted stay with the writer and become durable in order.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.lastEventUS.CompareAndSwap(0, c.cfg.Now().UnixMicro())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	c.abort = cancel
	c.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: waited for below
		defer wg.Done()
		for {
			select {
			case <-c.acks.Ready():
				c.collect()
			case <-ctx.Done():
				return
			}
		}
	}()
	err := c.loop(ctx)
	c.m.disconnected(c.cfg.Now(), nil) // the connection ends with Run
	cancel()
	wg.Wait()
	c.mu.Lock()
	c.abort = nil
	c.mu.Unlock()
	c.collect()
	if err == nil {
		err = c.failed()
	}
	return err
}

// stopped reports whether Run must end, and with which error (nil when
// ctx is done).
func (c *Consumer) stopped(ctx context.Context) (bool, error) {
	if err := c.failed(); err != nil {
		return true, err
	}
	if err := c.writerErr(); err != nil {
		return true, err
	}
	return ctx.Err() != nil, nil
}

func (c *Consumer) loop(ctx context.Context) error {
	bo := c.reconnects()
	for first := true; ; first = false {
		if stop, err := c.stopped(ctx); stop {
			return err
		}
		if !first {
			c.m.reconnect()
			t := time.NewTimer(bo.Next())
			select {
			case <-t.C:
			case <-ctx.Done():
			case <-c.cfg.Writer.Done():
			}
			t.Stop()
			if stop, err := c.stopped(ctx); stop {
				return err
			}
		}
		progressed, err := c.session(ctx)
		if progressed {
			bo.Reset()
		}
		var fe *fatalError
		if errors.As(err, &fe) {
			if ctx.Err() != nil && c.failed() == nil && c.writerErr() == nil {
				return nil
			}
			return fe.err
		}
		if ctx.Err() == nil && c.writerErr() == nil {
			c.m.disconnected(c.cfg.Now(), err)
			c.log.Info("firehose: disconnected; reconnecting", "err", err, "cursor", c.LastAccepted())
		}
	}
}

// session dials once and reads until the connection fails. progressed is
// true when at least one frame was accepted.
func (c *Consumer) session(ctx context.Context) (progressed bool, err error) {
	c.noteHole()
	conn, err := upstream.DialFirehose(ctx, c.cfg.Relay, c.resumeCursor(), c.cfg.ReadLimit)
	if err != nil {
		return false, err
	}
	c.connected.Store(true)
	if c.cfg.Mode == ModeLive {
		c.owes.Store(true) // the archive holds work: a later dial from the tip is a hole
	}
	defer func() {
		c.connected.Store(false)
		if c.owes.Load() && ctx.Err() == nil { // dropped, not stopped
			c.hole.Store(true)
		}
	}()
	c.m.connected(c.cfg.Now())
	c.below = 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: waited for in the deferred func
		defer wg.Done()
		c.watch(ctx, conn, done)
	}()
	defer func() {
		close(done)
		wg.Wait()
		_ = conn.Close()
	}()
	idle := c.cfg.IdleTimeout
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	var lastMsg atomic.Int64 // when the last message arrived (unix µs)
	lastMsg.Store(c.cfg.Now().UnixMicro())
	conn.SetPongHandler(func(string) error {
		c.idlePong(lastMsg.Load())
		return conn.SetReadDeadline(time.Now().Add(idle))
	})
	// One read buffer for the connection: Handle keeps nothing of msg
	// (DecodeFrame copies what it returns), so each message reuses it.
	var buf bytes.Buffer
	read := func() ([]byte, error) {
		for {
			mt, msg, err := readMessage(conn, &buf)
			if err != nil {
				return nil, err
			}
			_ = conn.SetReadDeadline(time.Now().Add(idle))
			lastMsg.Store(c.cfg.Now().UnixMicro())
			if mt == websocket.BinaryMessage {
				return msg, nil
			}
			c.m.frame(frameInvalid)
			c.m.anomaly(AnomalyUndecodable)
		}
	}
	if n := c.verifiers(); n > 0 {
		return c.pipelined(ctx, read, func() { _ = conn.Close() }, n)
	}
	for {
		msg, err := read()
		if err != nil {
			return progressed, err
		}
		before := c.last
		if err := c.Handle(ctx, msg); err != nil {
			return progressed, &fatalError{err}
		}
		if c.last != before {
			progressed = true
		}
	}
}

// noteHole notes, before a dial without a position, the hole of the time
// without a connection since work needed a position (Uncover): a no_cursor
// gap, recorded in the unit of the first frame accepted, the one that
// makes a position durable (a gap already pending covers it). Until then
// nothing is written: a consumer that stops first still owes it (Owing),
// and a restart without cursor/relay finds it again.
func (c *Consumer) noteHole() {
	if !c.hasPos && c.hole.Load() {
		c.noteGap(archive.GapNoCursor, false)
	}
}

// maxKeptReadBuffer is the largest read buffer kept for the next message;
// a bigger one (a rare huge frame) is dropped after use.
const maxKeptReadBuffer = 1 << 20

// readMessage is conn.ReadMessage into buf, reused across messages: the
// returned bytes are valid until the next call. The connection's read limit
// applies as with ReadMessage.
func readMessage(conn *websocket.Conn, buf *bytes.Buffer) (int, []byte, error) {
	if buf.Cap() > maxKeptReadBuffer {
		*buf = bytes.Buffer{}
	}
	buf.Reset()
	mt, r, err := conn.NextReader()
	if err != nil {
		return mt, nil, err
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return mt, nil, err
	}
	return mt, buf.Bytes(), nil
}

// watch closes conn when ctx ends or the writer stops (unblocking the read),
// and pings the relay so a silent but healthy connection stays open.
func (c *Consumer) watch(ctx context.Context, conn *websocket.Conn, done <-chan struct{}) {
	t := time.NewTicker(max(c.cfg.IdleTimeout/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			_ = conn.Close()
			return
		case <-c.cfg.Writer.Done():
			_ = conn.Close()
			return
		case <-t.C:
			_ = conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second))
		}
	}
}
