package archive

// This file owns archive.Writer: the single goroutine that allocates seqs,
// applies the per-account rev ratchet and field-level repo mutations, and
// commits group batches synced to disk before anyone hears of them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"golang.org/x/sync/semaphore"

	"github.com/backstream/backstream/internal/loglimit"
)

// KV is a key/value a unit makes durable with its rows: a cursor, a phase, a
// host state. Value nil deletes the key.
type KV struct {
	Key   []byte
	Value []byte
}

// SeqCursor is a producer's position in its source: Seq, stored under Key
// (KeyCursorRelay or KeyCursorMerge) with EncodeSeqCursor. A unit carries
// it instead of a Put so the writer can keep it behind units that wait (see
// WriterOptions.HoldTimeout): the durable value is the highest position
// applied, but never at or past the oldest waiting unit carrying the same
// key, and it never moves backwards. A nil Key carries no position.
type SeqCursor struct {
	Key []byte
	Seq uint64
	// Reset moves the cursor to Seq even when it is lower: the source
	// restarted its sequence (a relay that was rebuilt). Units carrying the
	// same key that wait behind a replacement when it arrives belong to the
	// earlier sequence: until they and the reset unit are applied, the
	// durable cursor stays where it was, below the oldest of them, and the
	// units after the reset are applied meanwhile (the producer need not
	// wait for its earlier units).
	Reset bool
}

// Replacement marks a unit as (one chunk of) a whole-repo replacement of DID
// at snapshot rev Rev: the unit is refused whole when the account's ratchet is
// already newer than Rev (S9). Every row and repo update of the unit must be
// of DID. A replacement is one producer's (one Acks') run of units for DID.
type Replacement struct {
	DID string
	Rev string
	// Final marks the replacement's last unit (the one carrying its
	// completion). From its first applied unit until its final one, the
	// replacement holds its account: units of other producers that touch
	// the account wait, and so does every later unit touching it, whatever
	// its producer (per-account order); units of other accounts go on. The
	// waiting units are applied in arrival order right after the final unit
	// (S5: no other row of the account in between). A refused unit ends the
	// replacement too; so does HoldTimeout without a unit. A replacement
	// that ended before its final unit cannot resume: its later units are
	// refused.
	Final bool
}

// Unit is what a producer submits: rows and the state that must become
// durable with them, all or nothing, in one batch. The writer owns the unit
// from Submit on; the producer must not touch it afterwards.
type Unit struct {
	Events  []Event      // in order; Seq and TimeUS are assigned by the writer
	Repos   []RepoUpdate // applied after the events, in order
	Hosts   []HostUpdate // applied after the repo updates, in order
	Puts    []KV         // phase, listRepos cursors, identities, gaps, audit cursors (only cursor/, meta/, ident/, gap/ and audit/, never a seq cursor or a key the store writes itself: meta/counts, meta/instance, meta/compaction, meta/due_index, meta/index, meta/index_replay)
	Cursor  SeqCursor    // the producer's position after this unit (cursor/relay, cursor/merge); see SeqCursor
	Replace *Replacement // non-nil: refused whole if the ratchet is newer than Replace.Rev
	Token   any          // returned in the receipt
	Acks    *Acks        // receives the receipt once the unit is durable (or refused); nil: nobody listens

	queued  int64 // the queue's bytes Submit took for it, given back when the writer takes it
	earlier bool  // it waited while a later unit reset its seq cursor: its position belongs to the earlier sequence
}

// HostUpdate changes host/<host> through Func, which gets the current state
// (the zero state when absent). Failures belongs to the writer: it is kept
// equal to the number of failed repos whose final host is Host, in the same
// batch as every repo transition, whatever Func returns for it.
type HostUpdate struct {
	Host string
	Func func(cur HostState) HostState
}

// Receipt tells a producer what became of a unit.
type Receipt struct {
	Token    any
	FirstSeq uint64 // seq of the first kept event (0 if none were kept)
	LastSeq  uint64 // seq of the last kept event
	Kept     int    // events appended (a live or merged sync row, which moves the ratchet only, is neither kept nor stale)
	Stale    int    // commit/sync rows dropped by the ratchet (and merged commits of a deleted or taken-down account)
	Synced   int    // live or merged sync rows that moved the ratchet and made no row
	Dropped  int    // rows dropped because waiting behind a replacement would pass a hold cap
	Cursor   uint64 // the durable position under the unit's Cursor.Key after its batch (below its own while earlier units wait)
	Refused  error  // non-nil: nothing of the unit was applied (invalid unit, or a replacement over newer data)
}

// ErrStaleReplacement: a replacement's snapshot rev is older than what the
// archive already holds for the account; the unit was refused whole (S9).
var ErrStaleReplacement = errors.New("replacement snapshot is older than the archived rev")

// ErrHoldExpired: the replacement sent no unit for HoldTimeout while it held
// its account, so the writer released the units waiting for it; its later
// units are refused. It matches ErrStaleReplacement too (the archive may now
// hold rows newer than the snapshot), so the job is fetched again.
var ErrHoldExpired = fmt.Errorf("replacement held its account past the hold timeout: %w", ErrStaleReplacement)

// ErrHoldOverflow: while the replacement held its account (or its first
// unit waited to), a unit that would have waited past the hold caps
// carried an account or identity row of it, which no replacement brings
// back, so the writer released the units waiting for it rather than
// dropping that row; the replacement's later units (and a waiting first
// one) are refused. It matches ErrStaleReplacement too (the archive
// now holds rows newer than the snapshot), so the job is fetched again.
var ErrHoldOverflow = fmt.Errorf("replacement's account passed the hold caps with a row no replacement restores: %w", ErrStaleReplacement)

// ErrInactiveReplacement: the archive holds the replacement's account
// inactive (an account row newer than the snapshot, such as a takedown or
// a deletion that landed between the download and the replacement's first
// unit), so the unit was refused whole: its rows would bring back the
// records the account row erased. It matches ErrStaleReplacement too; the
// producer reads the account's state again before fetching again.
var ErrInactiveReplacement = fmt.Errorf("replacement of an account the archive holds inactive: %w", ErrStaleReplacement)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// Capture makes this the capture writer: rows go to cap/ in their own seq
	// space; no ratchet, no repo mutations (merge applies those later).
	Capture bool
	// DiscoverUnknown: a live or merged commit with a since, of an account
	// the archive does not know (no rev/, no repo/), creates the account
	// pending, discovered, due now (markHoles). Off (a run restricted to a
	// few repos, which discovers nothing), such a commit marks nothing.
	DiscoverUnknown bool
	// MaxBatchRows and MaxBatchBytes bound one synced batch (group commit).
	MaxBatchRows  int
	MaxBatchBytes int
	// Linger is how long the writer waits for more units after the first one
	// of a batch when the queue runs dry. 0 commits as soon as the queue is
	// empty: under load batches grow by themselves while a sync is running.
	Linger time.Duration
	// BulkLinger, when Linger is 0, is how long a batch of bulk units waits
	// for more when the queue runs dry, so that a bootstrap's or a
	// replacement's many small units share one synced commit (a bulk unit
	// carries no seq cursor and no live row: a snapshot's chunks, repo and
	// host updates, ident/ and other puts). A unit with a seq cursor or a
	// live row ends the wait at once, so the live path never lingers.
	BulkLinger time.Duration
	// Queue and QueueBytes bound the submission queue: in units, and in
	// their rows' bytes as the live log counts them. Submit blocks while
	// either is full; a unit larger than QueueBytes waits for the queue
	// to empty and is queued alone.
	Queue      int
	QueueBytes int64
	// LiveLogBytes bounds the in-memory log of recent durable events.
	LiveLogBytes int64
	// HoldBytes and HoldAccountBytes bound the units waiting behind
	// replacements, in total and per account (rows' estimated bytes). A
	// unit that would pass either does not wait: its rows and repo updates
	// of the accounts it waits for are dropped (counted), each such account
	// is marked for another replacement in the same batch as the unit's
	// cursor, and the rest of the unit is applied at once. A unit carrying
	// an account or identity row of an account it waits for is not
	// dropped: it ends the replacements it waits for (ErrHoldOverflow), and
	// the waiting units and it are applied at once, in arrival order.
	HoldBytes        int64
	HoldAccountBytes int64
	// HoldTimeout is how long a replacement may hold its account without
	// sending a unit. Past it the hold is released (logged at ERROR,
	// counted), the waiting units go in arrival order, and the
	// replacement's later units are refused with ErrHoldExpired.
	HoldTimeout time.Duration
	Metrics     *Metrics
	Logger      *slog.Logger
	Now         func() time.Time
}

// Defaults chosen by BenchmarkWriter (see docs in doc.go).
const (
	DefaultMaxBatchRows  = 16384
	DefaultMaxBatchBytes = 16 << 20
	DefaultQueue         = 1024
	// A live frame may be 10 MiB (upstream.DefaultFirehoseReadLimit): 1,024
	// queued units of them would be 10 GiB. 64 MiB is four full batches.
	DefaultQueueBytes = 64 << 20
	// The live log holds the rows themselves (and pins the chunks and
	// slabs they were built in), so its bound is memory the process holds
	// for good once a bootstrap has filled it: 16 MiB is about 30 s of
	// a 1,000 events/s network; a subscriber further behind reads ev/.
	DefaultLiveLogBytes = 16 << 20
	// A live account rarely sends more than a few hundred rows while its
	// replacement runs; 16 replacements run at once by default (retry).
	DefaultHoldBytes        = 64 << 20
	DefaultHoldAccountBytes = 4 << 20
	DefaultHoldTimeout      = 2 * time.Minute
	// BulkLinger is the BulkLinger of serve's archive writer: a bootstrap's
	// units (each account's snapshot chunks and its ident/ put) share a
	// synced batch with about twice as many others (20,000 × 10: about
	// 6,000 syncs down to 3,000), a job's completion waits at most 2 ms
	// more, and the live path never waits.
	BulkLinger = 2 * time.Millisecond
)

func (o *WriterOptions) defaults() {
	if o.MaxBatchRows <= 0 {
		o.MaxBatchRows = DefaultMaxBatchRows
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.LiveLogBytes <= 0 {
		o.LiveLogBytes = DefaultLiveLogBytes
	}
	if o.HoldBytes <= 0 {
		o.HoldBytes = DefaultHoldBytes
	}
	if o.HoldAccountBytes <= 0 {
		o.HoldAccountBytes = DefaultHoldAccountBytes
	}
	if o.HoldTimeout <= 0 {
		o.HoldTimeout = DefaultHoldTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Writer is the single owner of one log's seqs (ev/ or cap/) and, for the
// archive writer, of repo/, rev/ and meta/counts.
type Writer struct {
	store  *Store
	opts   WriterOptions
	prefix []byte
	name   string // "ev" or "cap", for metrics and messages

	in     chan *Unit
	queued *semaphore.Weighted // the queue's bytes (QueueBytes)
	stop   chan struct{}
	// stopped ends when the writer goroutine exits (Done is its channel).
	stopped     context.Context
	markStopped context.CancelFunc
	once        sync.Once

	// owned by the writer goroutine
	nextSeq  uint64
	lastUS   int64
	counts   Counts
	bar      *barrier                // replacements in progress, units waiting for them, seq cursors (S5)
	lines    *loglimit.Every         // the hold-cap drop line: one per holdLogEvery
	revs     map[string]string       // ratchet values written in the open batch
	revCache durableCache[string]    // durable ratchet values
	repos    map[string]RepoState    // repo states written in the open batch
	repoMem  durableCache[RepoState] // durable repo states
	hosts    map[string]HostState    // host states written in the open batch
	buf      []byte
	idx      []idxEntry  // the open batch's index entries: rec/, tomb/
	idxBuf   []byte      // their keys and values
	replay   replayBatch // and its replay index entries: xc/, xd/, xm/
	resolver tombResolver
	covered  bool // the index covers every older row (indexCovered)

	mu      sync.Mutex
	err     error  // fatal error, set once
	durable Counts // meta/counts as of the last synced batch (R8)

	live   *LiveLog
	tombs  atomic.Uint64 // tomb/ entries committed (TombstonesWritten)
	linger *time.Timer   // a batch's Linger or BulkLinger (stopped between batches)
}

// NewWriter starts the writer goroutine over s. The tip seq and time are
// read from the store, so seqs continue after a restart and time never goes
// backwards.
func NewWriter(s *Store, opts WriterOptions) (*Writer, error) {
	opts.defaults()
	w := &Writer{
		store:    s,
		opts:     opts,
		prefix:   PrefixEvent,
		name:     "ev",
		in:       make(chan *Unit, opts.Queue),
		queued:   semaphore.NewWeighted(opts.QueueBytes),
		stop:     make(chan struct{}),
		revs:     make(map[string]string),
		bar:      newBarrier(barrierLimits{bytes: opts.HoldBytes, accountBytes: opts.HoldAccountBytes, timeout: opts.HoldTimeout}),
		lines:    loglimit.New(holdLogEvery, opts.Now),
		revCache: newDurableCache[string](ratchetCacheMax),
		repos:    make(map[string]RepoState),
		repoMem:  newDurableCache[RepoState](RepoCacheStates),
		hosts:    make(map[string]HostState),
		linger:   time.NewTimer(time.Hour),
	}
	w.linger.Stop()
	w.stopped, w.markStopped = context.WithCancel(context.Background())
	if opts.Capture {
		w.prefix, w.name = PrefixCapture, "cap"
	}
	tip, tipUS, err := s.tip(w.prefix)
	if err != nil {
		return nil, err
	}
	w.nextSeq, w.lastUS = tip+1, tipUS
	if !opts.Capture {
		c, err := s.Counts()
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("archive: start writer: %w", err)
		}
		if c, err = s.upgradeCounts(c, opts.Logger, opts.Now); err != nil {
			return nil, fmt.Errorf("archive: start writer: %w", err)
		}
		w.counts = c
		w.durable = c.Clone()
		opts.Metrics.setCounts(c)
		if w.revCache.all, err = s.empty(PrefixRev); err != nil {
			return nil, fmt.Errorf("archive: start writer: %w", err)
		}
		if w.repoMem.all, err = s.empty(PrefixRepo); err != nil {
			return nil, fmt.Errorf("archive: start writer: %w", err)
		}
	}
	w.live = newLiveLog(opts.LiveLogBytes, tip)
	go w.run()
	return w, nil
}

// DurableCounts returns meta/counts as of the last synced batch. Unlike a
// read of the store, it never shows a transition a crash could take back
// (Pebble makes a batch readable before its sync completes).
func (w *Writer) DurableCounts() Counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durable.Clone()
}

// Live is the in-memory log of recent durable events.
func (w *Writer) Live() *LiveLog { return w.live }

// Submit queues u. It blocks while the queue is full (backpressure) and fails
// when ctx is done or the writer has stopped. A unit the writer finds invalid
// is refused through its receipt, not here.
func (w *Writer) Submit(ctx context.Context, u *Unit) error {
	select {
	case <-w.stopped.Done():
		return w.stoppedErr()
	default:
	}
	if err := w.reserve(ctx, u); err != nil {
		return err
	}
	select {
	case w.in <- u:
		return nil
	case <-ctx.Done():
		w.dequeued(u)
		return ctx.Err()
	case <-w.stopped.Done():
		w.dequeued(u)
		return w.stoppedErr()
	}
}

// reserve takes u's bytes (at most all of them) from the queue's, waiting
// while the queue holds too many, until ctx ends or the writer stops.
func (w *Writer) reserve(ctx context.Context, u *Unit) error {
	n := min(queueBytes(u), w.opts.QueueBytes)
	if !w.queued.TryAcquire(n) {
		wait, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(w.stopped, cancel)()
		if err := w.queued.Acquire(wait, n); err != nil {
			if w.stopped.Err() != nil {
				return w.stoppedErr()
			}
			return err
		}
	}
	u.queued = n
	return nil
}

// dequeued gives u's bytes back to the queue: the writer has taken it (or
// Submit did not queue it).
func (w *Writer) dequeued(u *Unit) {
	if u.queued > 0 {
		w.queued.Release(u.queued)
		u.queued = 0
	}
}

// queueBytes is what u holds in the queue: its rows as the live log counts
// them, and its puts.
func queueBytes(u *Unit) int64 {
	n := int64(unitOverhead)
	for i := range u.Events {
		n += eventBytes(&u.Events[i])
	}
	for _, kv := range u.Puts {
		n += int64(len(kv.Key) + len(kv.Value))
	}
	return n
}

// Apply submits u and waits until it is durable (or refused). A convenience
// for low-rate producers and tests.
func (w *Writer) Apply(ctx context.Context, u *Unit) (Receipt, error) {
	acks := NewAcks()
	u.Acks = acks
	if err := w.Submit(ctx, u); err != nil {
		return Receipt{}, err
	}
	rc, err := acks.Wait(ctx, w, 1)
	if err != nil {
		return Receipt{}, err
	}
	return rc[0], nil
}

// Done is closed when the writer goroutine has exited (Close or a fatal error).
func (w *Writer) Done() <-chan struct{} { return w.stopped.Done() }

// Err is the fatal error that stopped the writer, nil after a clean Close.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) stoppedErr() error {
	if err := w.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// Close commits every unit already queued, stops the goroutine and returns
// the fatal error if one stopped it earlier.
func (w *Writer) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.stopped.Done()
	return w.Err()
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// pending is the batch being built.
type pending struct {
	b        *pebble.Batch
	rows     int
	units    []*Unit
	receipts []Receipt
	events   []*Event // kept events, in seq order, for the live log
	counts   bool     // meta/counts changed
	puts     []KV     // the units' Puts, last value per key, written at commit
	putIdx   map[string]int
	cursors  [len(seqCursorKeys)]bool // seq cursors moved by the batch's units
	rowsBy   [5]int                   // kept rows by source
	staleBy  [5]int                   // stale rows by source
	tombs    int                      // tomb/ entries written
	dueLow   int64                    // the earliest next attempt + 1 of the due/ entries written; 0: none
	roster   bool                     // a roster entry changed (Store.RosterGeneration)
	rank     bool                     // a hostrank/ entry changed (Store.TopFailingHosts)
}

func (w *Writer) run() {
	defer w.markStopped()
	defer w.live.close()
	// expiry fires at the earliest hold deadline, so an abandoned
	// replacement releases its account even when no unit arrives.
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	for {
		var first *Unit
		var expired <-chan time.Time
		if d, ok := w.bar.deadline(); ok {
			expiry.Reset(d.Sub(w.opts.Now()))
			expired = expiry.C
		}
		select {
		case first = <-w.in:
		case <-expired:
		case <-w.stop:
			// Drain what was queued before Close. Units still waiting for
			// a replacement stay unapplied: no receipt, and their seq
			// cursor never passed them.
			for {
				select {
				case u := <-w.in:
					if !w.commitBatch(u) {
						return
					}
				default:
					return
				}
			}
		}
		if !w.commitBatch(first) {
			return
		}
	}
}

// commitBatch builds one batch starting with first (nil: only the holds
// that expired), commits it synced, then publishes. It returns false when
// the writer must stop (fatal error).
func (w *Writer) commitBatch(first *Unit) bool {
	p := &pending{b: w.store.db.NewBatch()}
	defer p.b.Close()
	w.fill(p, first)
	if err := w.Err(); err != nil {
		return false
	}
	if !w.seal(p) {
		return false
	}
	if !w.opts.Capture { // the capture writer never holds; the metrics are shared
		w.opts.Metrics.setHeld(w.bar.units())
	}
	if len(p.units) == 0 && p.b.Empty() {
		return true // every unit waits (or an expiry released none)
	}
	start := time.Now()
	if !p.b.Empty() && !w.commit(p) {
		return false
	}
	// Durable: now, and only now, tell anyone.
	w.published(p, time.Since(start))
	return true
}

// fill applies the expired holds, first, and the units queued behind it
// to p, until the batch is full or the queue is dry (after the linger, for
// a bulk batch).
func (w *Writer) fill(p *pending, first *Unit) {
	w.expire(p)
	if first != nil {
		w.add(p, first)
	}
	linger, bulkOnly := w.lingerFor(first)
	if linger != nil {
		defer w.linger.Stop()
	}
	for p.rows < w.opts.MaxBatchRows && p.b.Len() < w.opts.MaxBatchBytes {
		var u *Unit
		select {
		case u = <-w.in:
		default:
			if linger == nil {
				return
			}
			select {
			case u = <-w.in:
			case <-linger:
				return
			case <-w.stop:
				return
			}
		}
		w.add(p, u)
		if bulkOnly && !bulk(u) {
			linger = nil // commit as soon as the queue is dry
		}
	}
}

// seal adds the batch's keyed writes (ratchets, cursors, puts), index
// entries and counts to p's batch. It returns false when the writer must
// stop.
func (w *Writer) seal(p *pending) bool {
	if err := w.flushKeyed(p); err != nil {
		w.bug(err)
		return false
	}
	if err := w.writeIndex(p); err != nil {
		w.fail(err)
		return false
	}
	if p.counts {
		v, err := EncodeCounts(w.counts)
		if err != nil {
			w.fail(fmt.Errorf("archive: %s writer: %w", w.name, err))
			return false
		}
		_ = p.b.Set(KeyCounts, v, nil)
	}
	return true
}

// commit commits p's batch synced. It returns false when the writer must
// stop.
func (w *Writer) commit(p *pending) bool {
	err := w.store.checkCommit("commit "+w.name+" batch", p.b)
	if err == nil {
		err = commitSynced(p.b)
	}
	if p.roster {
		// After the commit, whatever its outcome: a roster figure read
		// before it is not taken for one read after.
		w.store.rosterGen.Add(1)
	}
	if p.rank {
		w.store.rankGen.Add(1) // likewise for the failure ranking
	}
	if err == nil {
		return true
	}
	var fe *FatalError
	if !errors.As(err, &fe) {
		err = w.store.persistErr(fmt.Sprintf("commit %s batch of %d rows", w.name, p.rows), err)
	}
	w.fail(err)
	return false
}

// published tells everyone of a durable batch: the states the writer
// reads, the live log, the metrics (took: its commit) and the units'
// receipts.
func (w *Writer) published(p *pending, took time.Duration) {
	m := w.opts.Metrics
	w.durableStates()
	w.store.dueWritten(p.dueLow)
	w.live.publish(p.events)
	w.tombs.Add(uint64(p.tombs))
	m.committed(w.name, p.rows, took.Seconds(), w.nextSeq-1)
	for src := SourceBackfill; src <= SourceRetry; src++ {
		m.addRows(w.name, src, p.rowsBy[src])
		m.addStale(src, p.staleBy[src])
	}
	if p.counts {
		m.setCounts(w.counts)
		w.mu.Lock()
		w.durable = w.counts.Clone()
		w.mu.Unlock()
	}
	for i, u := range p.units {
		if u.Acks == nil {
			continue
		}
		if c, ok := cursorIndex(u.Cursor.Key); ok && p.receipts[i].Refused == nil {
			p.receipts[i].Cursor = w.bar.written(c)
		}
		u.Acks.push(p.receipts[i])
	}
}

// durableStates moves the committed batch's ratchets and repo states
// into the writer's caches of durable state.
func (w *Writer) durableStates() {
	for did, rev := range w.revs {
		w.revCache.put(did, rev)
	}
	clear(w.revs)
	for did, st := range w.repos {
		w.repoMem.put(did, st)
	}
	clear(w.repos)
	clear(w.hosts)
}

// lingerFor starts the wait of a batch that starts with first: Linger's,
// or BulkLinger's for a bulk first unit (bulkOnly: a unit that is not bulk
// ends it). A nil channel: no wait.
func (w *Writer) lingerFor(first *Unit) (linger <-chan time.Time, bulkOnly bool) {
	d := w.opts.Linger
	if d <= 0 && first != nil && bulk(first) {
		d, bulkOnly = w.opts.BulkLinger, true
	}
	if d <= 0 {
		return nil, false
	}
	w.linger.Reset(d)
	return w.linger.C, bulkOnly
}

// bulk reports whether u may wait up to BulkLinger for company: no seq
// cursor (a live frame's or merge's position) and no live row.
func bulk(u *Unit) bool {
	if u.Cursor.Key != nil {
		return false
	}
	for i := range u.Events {
		if u.Events[i].Source == SourceLive {
			return false
		}
	}
	return true
}

// flushKeyed writes the batch's last value of every rev/ key and every
// Put, and each seq cursor the batch moved: a live frame moves cursor/relay
// and its account's rev/ once per unit, and one Pebble write per key per
// batch instead of one per unit is a third of the memtable work of a
// single-op commit. The batch is atomic, so only the last value of a key
// could ever be seen. Values were validated in stage: an encoding failure
// here is the writer's own bug, and fatal.
func (w *Writer) flushKeyed(p *pending) error {
	for did, rev := range w.revs {
		v, err := EncodeRev(rev)
		if err != nil {
			return fmt.Errorf("ratchet of %s: %w", did, err)
		}
		_ = p.b.Set(RevKey(did), v, nil)
	}
	for i, moved := range p.cursors {
		if !moved {
			continue
		}
		pos, ok := w.bar.cursorToWrite(i)
		if !ok {
			continue
		}
		v, err := EncodeSeqCursor(pos)
		if err != nil {
			return fmt.Errorf("%s: %w", seqCursorKeys[i], err)
		}
		_ = p.b.Set(seqCursorKeys[i], v, nil)
	}
	for _, kv := range p.puts {
		if kv.Value == nil {
			_ = p.b.Delete(kv.Key, nil)
		} else {
			_ = p.b.Set(kv.Key, kv.Value, nil)
		}
	}
	return nil
}

// add applies u, or lets it wait behind a replacement in progress (S5).
func (w *Writer) add(p *pending, u *Unit) {
	w.dequeued(u)
	a := w.bar.admit(u, w.opts.Now())
	m := w.opts.Metrics
	if a.wait {
		m.held()
		if len(a.ended) > 0 {
			w.opts.Logger.Warn("archive writer: a unit with an account or identity row would wait past the hold caps; ending the replacements it waits for and releasing the units waiting for them",
				"accounts", a.ended)
			w.release(p)
		}
		return
	}
	if len(a.marked) > 0 {
		m.holdDropped(a.dropped)
		w.lines.Log(w.opts.Logger, slog.LevelWarn, "hold_drop", "archive writer: a unit would wait past the hold caps; its rows of the held accounts are dropped and the accounts marked for another replacement",
			"accounts", a.marked, "rows", a.dropped)
	}
	if w.applyOne(p, u, a.dropped) {
		w.release(p)
	}
}

// holdLogEvery bounds the hold-cap drop line: an account committing fast
// while its replacement is slow sends a unit past the cap per commit (each
// counted in backstream_archive_hold_dropped_rows_total).
const holdLogEvery = time.Minute

// release applies the waiting units that no longer wait, in arrival order.
func (w *Writer) release(p *pending) {
	w.bar.release(func(u *Unit) bool { return w.applyOne(p, u, 0) })
}

// expire releases the holds past their deadline (a replacement that stopped
// sending units: a bug or a dead job).
func (w *Writer) expire(p *pending) {
	dids := w.bar.expire(w.opts.Now())
	if len(dids) == 0 {
		return
	}
	for _, did := range dids {
		w.opts.Metrics.holdExpired()
		w.opts.Logger.Error("archive writer: a replacement held its account past the hold timeout without a unit; releasing the units waiting for it and refusing its later units",
			"did", did, "timeout", w.opts.HoldTimeout)
	}
	w.release(p)
}

// applyOne applies u (or refuses it) and tells the barrier; it reports
// whether a replacement's hold closed.
func (w *Writer) applyOne(p *pending, u *Unit, dropped int) (closed bool) {
	refused := !w.apply(p, u, dropped)
	if !refused {
		if c, ok := cursorIndex(u.Cursor.Key); ok {
			p.cursors[c] = true
		}
	}
	return w.bar.applied(u, refused, w.opts.Now())
}

// apply stages and applies one unit; it reports false when the unit was
// refused.
func (w *Writer) apply(p *pending, u *Unit, dropped int) bool {
	r := Receipt{Token: u.Token, Dropped: dropped}
	err := w.bar.refusal(u)
	var st *staged
	if err == nil {
		st, err = w.stage(u)
	}
	if err != nil {
		w.refuse(p, u, r, err)
		return false
	}
	w.applyRows(p, u, st, &r)
	for did, rev := range st.revs {
		w.revs[did] = rev // written once per batch, at commit (flushKeyed)
	}
	w.applyRepos(p, st)
	w.applyHosts(p, st)
	p.addPuts(u.Puts)
	p.units = append(p.units, u)
	p.receipts = append(p.receipts, r)
	return true
}

// applyRows gives u's kept rows their seqs and times, writes them and
// their index entries to p's batch, and counts them into r.
func (w *Writer) applyRows(p *pending, u *Unit, st *staged, r *Receipt) {
	now := w.opts.Now().UnixMicro()
	for i := range u.Events {
		ev := &u.Events[i]
		if !st.keep[i] {
			r.Stale++
			p.staleBy[ev.Source]++
			continue
		}
		if !w.opts.Capture && upstreamSync(ev) {
			r.Synced++
			continue // its rev moved the ratchet (stage); no row
		}
		// Every kept event gets its own time, max(now, previous+1): a
		// client resuming by time_us lands on exactly one event.
		w.lastUS = max(now, w.lastUS+1)
		ev.Seq, ev.TimeUS = w.nextSeq, w.lastUS
		w.nextSeq++
		if !w.opts.Capture {
			ev.Since = "" // checked in stage; only cap/ keeps it, for merging
		}
		var err error
		if w.buf, err = AppendEvent(w.buf[:0], ev); err != nil {
			w.bug(fmt.Errorf("event of %s: %w", ev.DID, err)) // validated in stage
		}
		_ = p.b.Set(seqKey(w.prefix, ev.Seq), w.buf, nil)
		if !w.opts.Capture {
			w.index(p, ev)
		}
		if r.Kept == 0 {
			r.FirstSeq = ev.Seq
		}
		r.LastSeq = ev.Seq
		r.Kept++
		p.rows++
		p.rowsBy[ev.Source]++
		p.events = append(p.events, ev)
	}
}

// applyRepos writes st's repo states, their due/ entries and the counts'
// changes.
func (w *Writer) applyRepos(p *pending, st *staged) {
	for _, ch := range st.repoOrder {
		ns := st.repos[ch]
		old, existed := st.old[ch]
		v, err := EncodeRepoState(ns)
		if err != nil {
			w.bug(fmt.Errorf("repo state of %s: %w", ch, err)) // validated in stage
		}
		_ = p.b.Set(RepoKey(ch), v, nil)
		if indexDue(p.b, ch, old, existed, ns) {
			p.noteDue(ns.NextAttemptUS)
		}
		w.repos[ch] = ns
		w.count(old, existed, ns)
		p.counts = true
	}
}

// applyHosts writes st's host states and their hostrank/ entries.
func (w *Writer) applyHosts(p *pending, st *staged) {
	for _, h := range st.hostOrder {
		ch := st.hosts[h]
		if ch.ns == (HostState{}) {
			// Nothing left to keep (no failures, no parking): host/ holds
			// only the hosts that need it.
			_ = p.b.Delete(HostKey(h), nil)
		} else {
			v, err := EncodeHostState(ch.ns)
			if err != nil {
				w.bug(fmt.Errorf("host state of %s: %w", h, err)) // validated in stage
			}
			_ = p.b.Set(HostKey(h), v, nil)
		}
		if ch.old.Status != ch.ns.Status || ch.old.Accounts != ch.ns.Accounts {
			p.roster = true
		}
		if ch.old.Failures != ch.ns.Failures {
			p.rank = true
			if ch.old.Failures > 0 {
				_ = p.b.Delete(HostRankKey(ch.old.Failures, h), nil)
			}
			if ch.ns.Failures > 0 {
				_ = p.b.Set(HostRankKey(ch.ns.Failures, h), nil, nil)
			}
		}
		w.hosts[h] = ch.ns
	}
}

// addPuts adds a unit's puts to the batch's, a later put of a key
// replacing an earlier one (written at commit, after the rows).
func (p *pending) addPuts(puts []KV) {
	for _, kv := range puts {
		if i, ok := p.putIdx[string(kv.Key)]; ok {
			p.puts[i] = kv
			continue
		}
		if p.putIdx == nil {
			p.putIdx = make(map[string]int)
		}
		p.putIdx[string(kv.Key)] = len(p.puts)
		p.puts = append(p.puts, kv)
	}
}

// idxEntry is one rec/ or tomb/ entry of the open batch: key and value
// as offsets into Writer.idxBuf. fold marks the rec/ entry of a
// download's create, which foldRuns may fold into a run entry.
type idxEntry struct {
	k0, k1, v1 int
	fold       bool
}

// index adds the compaction index of an archived row to the open batch's
// entries: the rec/ entry of a record row (create, update, delete) and the
// tomb/ entry of a row that supersedes older ones (Supersedes; a record's
// is added at commit, naming what it supersedes: writeIndex); and its
// replay index entries (replayBatch). They are blind Sets, written at
// commit in key order (writeIndex). No allocation once the buffers have
// grown.
func (w *Writer) index(p *pending, ev *Event) {
	var tomb bool
	var err error
	w.idxBuf, w.idx, tomb, err = appendIndex(w.idxBuf, w.idx, ev, len(w.buf)) // w.buf holds the row
	if err != nil {
		w.bug(fmt.Errorf("tombstone of %s: %w", ev.DID, err)) // validated in stage
		return
	}
	w.replay.add(ev, w.buf)
	if tomb {
		p.tombs++
	}
}

// appendIndex appends the compaction index entries of the archived row ev,
// whose ev/ value has size bytes, to buf and idx: the rec/ entry of a
// record row and the tomb/ entry of an account row that supersedes older
// ones. It reports whether ev supersedes older rows (Supersedes): a
// record's tombstone is appended with the batch's (appendRecordTombs). The
// one encoding of the index, for the writer and the index backfill.
func appendIndex(buf []byte, idx []idxEntry, ev *Event, size int) ([]byte, []idxEntry, bool, error) {
	if ev.Kind.IsCommit() {
		k0 := len(buf)
		buf = AppendRecordKey(buf, ev.DID, ev.Collection, ev.RKey, ev.Seq)
		k1 := len(buf)
		buf = AppendRecordValue(buf, ev.Kind, size)
		idx = append(idx, idxEntry{k0: k0, k1: k1, v1: len(buf), fold: ev.Kind == KindCreate && ev.Source.download()})
	}
	t, ok := Supersedes(ev)
	if !ok || t.Kind != KindAccount {
		return buf, idx, ok, nil
	}
	k0 := len(buf)
	buf = AppendTombKey(buf, ev.DID, ev.Seq)
	k1 := len(buf)
	var err error
	if buf, err = AppendTomb(buf, t); err != nil {
		return buf, idx, false, err
	}
	return buf, append(idx, idxEntry{k0: k0, k1: k1, v1: len(buf)}), true, nil
}

// writeIndex adds the batch's record tombstones, named once the index
// covers every older row (indexCovered), then folds stretches of creates
// into run entries (recrun.go), and writes the batch's index
// entries in key order: Pebble inserts a batch into its memtable in batch
// order and reuses the last insert's position when the next key lands next
// to it, so sorted rec/ keys (one account's records are neighbours) cost a
// fraction of scattered ones. An error (reading rec/) is fatal.
func (w *Writer) writeIndex(p *pending) error {
	defer func() { w.idx, w.idxBuf = w.idx[:0], w.idxBuf[:0] }()
	w.replay.write(p.b)
	if len(w.idx) == 0 {
		return nil
	}
	var r pebble.Reader
	if covered, err := w.indexCovered(); err != nil {
		return err
	} else if covered {
		r = w.store.db
	}
	var err error
	if w.idxBuf, w.idx, err = w.resolver.appendRecordTombs(r, w.idxBuf, w.idx); err != nil {
		return w.store.resolveErr(err)
	}
	if r != nil {
		// Runs only once the index covers every older row: the pass's
		// lookups for unnamed tombstones (written before) do not read runs.
		w.idxBuf, w.idx = w.resolver.foldRuns(w.idxBuf, w.idx)
	}
	w.resolver.setIndex(p.b, w.idxBuf, w.idx)
	return nil
}

// indexCovered reports whether the record index covers every row older
// than the writer's (meta/index is done; it stays done). A malformed
// meta/index halts compaction, which the compaction owner reports; the
// writer goes on as during a backfill (unnamed tombstones, which a pass
// can apply, and no runs) and reads the marker again at its next batch.
func (w *Writer) indexCovered() (bool, error) {
	if !w.covered {
		m, err := w.store.IndexMarker()
		switch {
		case errors.Is(err, ErrCompactionState):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("archive: %s writer: %w", w.name, err)
		}
		w.covered = m.Done()
	}
	return w.covered, nil
}

// setIndex adds the index entries idx (into buf) to b, in key order.
func (t *tombResolver) setIndex(b *pebble.Batch, buf []byte, idx []idxEntry) {
	t.sortIndex(buf, idx)
	for _, e := range idx {
		_ = b.Set(buf[e.k0:e.k1], buf[e.k1:e.v1], nil)
	}
}

// bug stops the writer over a value stage should have refused: the batch
// being built is never committed (commitBatch checks Err before it commits).
func (w *Writer) bug(err error) {
	w.fail(fmt.Errorf("archive: %s writer: %w", w.name, err))
}

// refuse records u's refusal in the batch's receipts. A failure to read our
// own state is fatal; an invalid unit is a producer bug (logged); a stale
// replacement is an ordinary outcome.
func (w *Writer) refuse(p *pending, u *Unit, r Receipt, err error) {
	if !errors.Is(err, errInvalidUnit) && !errors.Is(err, ErrStaleReplacement) {
		// Our own persistence failed to read back: crash loud.
		w.fail(fmt.Errorf("archive: %s writer: %w", w.name, err))
	} else {
		w.opts.Metrics.refused()
		if !errors.Is(err, ErrStaleReplacement) {
			w.opts.Logger.Error("archive writer refused a unit (producer bug)", "log", w.name, "err", err)
		}
	}
	r.Refused = err
	p.units = append(p.units, u)
	p.receipts = append(p.receipts, r)
}

// indexDue keeps the due index (PrefixDue) of one repo whose state moves
// from old (existed: there was one) to ns, in the batch that writes ns: the
// old entry goes, the new one comes, and an unchanged entry is left alone.
func indexDue(b *pebble.Batch, did string, old RepoState, existed bool, ns RepoState) (set bool) {
	was, is := existed && old.Retryable(), ns.Retryable()
	if was && is && max(old.NextAttemptUS, 0) == max(ns.NextAttemptUS, 0) && old.Host == ns.Host {
		return false
	}
	if was {
		_ = b.Delete(DueKey(old.NextAttemptUS, did), nil)
	}
	if is {
		_ = b.Set(DueKey(ns.NextAttemptUS, did), []byte(ns.Host), nil)
	}
	return is
}

// noteDue records a due/ entry of the batch at nextUS (its earliest one is
// published to Store.TakeDueWritten once the batch is durable).
func (p *pending) noteDue(nextUS int64) {
	if v := max(nextUS, 0) + 1; p.dueLow == 0 || v < p.dueLow {
		p.dueLow = v
	}
}

func (w *Writer) count(old RepoState, existed bool, ns RepoState) {
	if existed {
		w.counts.ByStatus[old.Status]--
		if !old.Active {
			w.counts.Inactive--
		}
		if old.Status == StatusFailed {
			w.counts.uncountFailed(old)
		}
	}
	w.counts.ByStatus[ns.Status]++
	if !ns.Active {
		w.counts.Inactive++
	}
	if ns.Status == StatusFailed {
		w.counts.countFailed(ns)
	}
}

// errInvalidUnit marks refusals caused by the unit itself.
var errInvalidUnit = errors.New("invalid unit")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalidUnit, fmt.Sprintf(format, args...))
}

// staged is the outcome of deciding a unit against the current state.
type staged struct {
	keep      []bool
	revs      map[string]string // new ratchet values
	repos     map[string]RepoState
	old       map[string]RepoState // previous state of repos that existed
	repoOrder []string
	hosts     map[string]hostChange
	hostOrder []string
}

// hostChange is one host/ write of a unit.
type hostChange struct {
	old HostState // as of the open batch, before the unit
	ns  HostState
}

// stage decides every row and mutation of u without touching the batch.
func (w *Writer) stage(u *Unit) (*staged, error) {
	if err := validateUnit(u); err != nil {
		return nil, err
	}
	st := &staged{keep: make([]bool, len(u.Events))}
	if w.opts.Capture {
		if len(u.Repos) > 0 || len(u.Hosts) > 0 || u.Replace != nil {
			return nil, invalid("the capture writer takes no repo or host mutations or replacements")
		}
		for i := range st.keep {
			st.keep[i] = true
		}
		return st, nil
	}
	if err := checkReplacement(u); err != nil {
		return nil, err
	}
	if err := w.stageRows(st, u); err != nil {
		return nil, err
	}
	if err := w.stageRepos(st, u.Repos); err != nil {
		return nil, err
	}
	if err := w.stageHosts(st, u.Hosts); err != nil {
		return nil, err
	}
	return st, nil
}

// validateUnit checks u's events, puts and cursor, whatever the state.
func validateUnit(u *Unit) error {
	for i := range u.Events {
		if err := ValidateEvent(&u.Events[i]); err != nil {
			return invalid("event %d: %v", i, err)
		}
	}
	for i := range u.Repos {
		if err := checkRepoUpdate(&u.Repos[i]); err != nil {
			return err
		}
	}
	for _, kv := range u.Puts {
		if err := checkPutKey(kv.Key); err != nil {
			return err
		}
	}
	if c := u.Cursor; c.Key != nil {
		if _, ok := cursorIndex(c.Key); !ok {
			return invalid("unit cursor under %q, which is not a seq cursor", c.Key)
		}
		if c.Seq > math.MaxInt64 {
			return invalid("unit cursor %d above MaxInt64", c.Seq)
		}
	}
	return nil
}

// checkRepoUpdate checks what can be known of a repo update without the
// state it applies to: its DID, and its fields unless it is a function.
func checkRepoUpdate(up *RepoUpdate) error {
	if up.DID == "" || len(up.DID) > maxDID {
		return invalid("repo update for DID of %d bytes", len(up.DID))
	}
	if up.Func == nil && (up.Fields&^allRepoFields != 0 || up.Fields == 0) {
		return invalid("repo update for %s names fields 0x%x", up.DID, up.Fields)
	}
	return nil
}

// stagedRev is did's rev ratchet as st leaves it: st's new value, else
// the durable one.
func (w *Writer) stagedRev(st *staged, did string) (string, error) {
	if r, ok := st.revs[did]; ok {
		return r, nil
	}
	return w.ratchet(did)
}

// stageRows decides which of u's rows are kept (st.keep) against the rev
// ratchets, and the ratchets' new values (st.revs): backfill and retry rows
// are kept (a replacement's up to its snapshot's rev, which a newer
// archived rev refuses), a live or merge commit only above its account's
// ratchet (or at the rev this unit kept it at: the other ops of one
// commit). A commit whose since is ahead of the ratchet marks a hole.
//
// A merged commit of an account the archive holds deleted or taken down
// is dropped too (stale), whatever its rev: bootstrap's listing, later
// than the captured stream, may have recorded the account so while the
// captured commits before its #account are merged after that; with the
// #account lost (a dropped frame) nothing would erase them, and no audit
// looks again at an account it finds as listed. A captured #account that
// reactivates the account lets its later commits through, in this unit
// too.
func (w *Writer) stageRows(st *staged, u *Unit) error {
	st.revs = make(map[string]string)
	if u.Replace != nil {
		cur, err := w.stagedRev(st, u.Replace.DID)
		if err != nil {
			return err
		}
		held, _, err := w.heldRev(u.Replace.DID, cur)
		if err != nil {
			return err
		}
		if held > u.Replace.Rev {
			return fmt.Errorf("%w: %s archived at %s, snapshot at %s", ErrStaleReplacement, u.Replace.DID, held, u.Replace.Rev)
		}
		rs, exists, err := w.repoState(u.Replace.DID)
		if err != nil {
			return err
		}
		if exists && !rs.Active {
			return fmt.Errorf("%w: %s (%s)", ErrInactiveReplacement, u.Replace.DID, rs.AccountStatus)
		}
	}
	// admitted remembers the (did, rev) a live/merge row of this unit was
	// kept at, so the other ops of the same commit pass too.
	admitted := map[string]string{}
	// erased is whether an #account row of this unit, before the row at
	// hand, left its account deleted or taken down (nil until one).
	var erased map[string]bool
	var holes []hole // commits whose since is newer than the ratchet as it stands before them
	// lastAccount is the index of each account's last #account row in the
	// unit (nil until one).
	var lastAccount map[string]int
	for i := range u.Events {
		ev := &u.Events[i]
		if ev.Kind == KindAccount {
			if erased == nil {
				erased, lastAccount = map[string]bool{}, map[string]int{}
			}
			erased[ev.DID] = !ev.Active && AccountStatusPurges(ev.Status)
			lastAccount[ev.DID] = i
		}
		if !(ev.Kind.IsCommit() || ev.Kind == KindSync) {
			st.keep[i] = true
			continue
		}
		cur, err := w.stagedRev(st, ev.DID)
		if err != nil {
			return err
		}
		switch ev.Source {
		case SourceBackfill, SourceRetry:
			if u.Replace != nil && ev.Rev > u.Replace.Rev {
				return invalid("replacement row at rev %s above the snapshot rev %s", ev.Rev, u.Replace.Rev)
			}
			st.keep[i] = true
		default:
			held, known, err := w.heldRev(ev.DID, cur)
			if err != nil {
				return err
			}
			if ev.Since != "" && sinceAhead(ev, held, known, w.opts.DiscoverUnknown) {
				holes = append(holes, hole{did: ev.DID, at: i})
			}
			st.keep[i] = ev.Rev > held || (ev.Rev == cur && admitted[ev.DID] == ev.Rev)
			if st.keep[i] && ev.Source == SourceMerge && ev.Kind.IsCommit() {
				gone, err := w.erasedAccount(erased, ev.DID)
				if err != nil {
					return err
				}
				st.keep[i] = !gone
			}
			if st.keep[i] {
				admitted[ev.DID] = ev.Rev
			}
		}
		if st.keep[i] && ev.Rev > cur {
			st.revs[ev.DID] = ev.Rev
		}
	}
	if u.Replace != nil {
		if cur, err := w.stagedRev(st, u.Replace.DID); err != nil {
			return err
		} else if u.Replace.Rev > cur {
			st.revs[u.Replace.DID] = u.Replace.Rev
		}
	}
	w.markHoles(u, holes, lastAccount)
	return nil
}

// stageRepos applies the repo mutations ups, in order, to the states st
// and the store hold (st.repos, and st.old: the durable states they
// replace).
func (w *Writer) stageRepos(st *staged, ups []RepoUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	st.repos = make(map[string]RepoState, len(ups))
	st.old = make(map[string]RepoState, len(ups))
	for _, up := range ups { // checkRepoUpdate passed (validateUnit)
		cur, seen := st.repos[up.DID]
		exists := seen
		if !seen {
			var err error
			cur, exists, err = w.repoState(up.DID)
			if err != nil {
				return err
			}
		}
		ns := cur
		if up.Func != nil {
			next, write := up.Func(cur, exists)
			if !write {
				continue
			}
			ns = next
		} else {
			ns = up.apply(cur)
		}
		if !seen {
			if exists {
				st.old[up.DID] = cur
			}
			st.repoOrder = append(st.repoOrder, up.DID)
		}
		if !ns.Status.Valid() {
			return invalid("repo update leaves %s without a valid status", up.DID)
		}
		if _, err := EncodeRepoState(ns); err != nil {
			return invalid("repo update for %s: %v", up.DID, err)
		}
		st.repos[up.DID] = ns
	}
	return nil
}

// upstreamSync reports whether ev is an upstream #sync (live, or merged
// from the capture) rather than a replacement's opening row. It moves the
// ratchet like a kept row but is not archived: the replacement it marks the
// account for opens with its own sync row at the snapshot's rev, so a
// subscriber sees one sync event per upstream reset.
func upstreamSync(ev *Event) bool {
	return ev.Kind == KindSync && (ev.Source == SourceLive || ev.Source == SourceMerge)
}

// heldRev is the newest rev the archive holds of did's account, and
// whether the account has a repo/ state: the ratchet cur, or, when the
// account has none, its completed snapshot's rev. A snapshot without a
// record stores no row, so it sets no rev/, yet it covers every commit up
// to its rev as a snapshot with rows does: a live or merged commit at or
// below it is stale (the ones captured before it would bring back the
// records it no longer holds).
func (w *Writer) heldRev(did, cur string) (string, bool, error) {
	if cur != "" {
		return cur, true, nil
	}
	rs, ok, err := w.repoState(did)
	if err != nil || !ok {
		return "", ok, err
	}
	if rs.Status != StatusComplete {
		return "", true, nil
	}
	return rs.BackfillRev, true, nil
}

// sinceAhead reports whether ev's since (not empty) is newer than what the
// archive holds of its account (held, heldRev). An account the archive
// does not know at all (no rev/, no repo/: no listing named it) holds
// nothing of what came before ev: a hole when the writer discovers such
// accounts (discover, WriterOptions.DiscoverUnknown).
func sinceAhead(ev *Event, held string, known, discover bool) bool {
	if !known {
		return discover
	}
	return held != "" && ev.Since > held
}

// hole is a commit whose since is newer than what the archive held of its
// account: its DID and its row's index in the unit.
type hole struct {
	did string
	at  int
}

// markHoles marks each account in holes for a replacement (RefetchSync, due
// now), in u's batch: a commit of it came with a since (Event.Since) newer
// than what the archive held of the account when that commit applied, so a
// commit in between never reached the archive — a relay that dropped it, a
// stream that resumed past it. The check is per commit (a merge unit holds
// many commits of many accounts; after a commit's first row the ratchet is
// at its rev), against the ratchet or a completed snapshot (sinceAhead),
// and only for accounts with rows in the unit (the barrier admitted them).
// One already marked is made due again from now: a replacement already
// running (its snapshot maybe older than this hole) keeps the mark. An
// account the archive did not know is created pending, discovered, due
// now (WriterOptions.DiscoverUnknown): its first commit here came with a
// since, so it has a history no listing brought.
//
// The marks are applied after the unit's own repo updates. Those of an
// #account row after the commit (lastAccount: each account's last one in
// the unit) found an account created here unknown and changed nothing, so
// the account is created as that row leaves it (its activity and status),
// as it is when the two events are merged in two units: a merge unit holds
// up to 1,024 rows, and an account deleted, taken down or deactivated
// after such a commit must not be created active, to be replaced.
func (w *Writer) markHoles(u *Unit, holes []hole, lastAccount map[string]int) {
	if len(holes) == 0 {
		return
	}
	now := w.opts.Now().UnixMicro()
	for _, h := range holes {
		active, status := true, ""
		if j, ok := lastAccount[h.did]; ok && j > h.at {
			active, status = u.Events[j].Active, u.Events[j].Status
		}
		mark := func(cur RepoState, exists bool) (RepoState, bool) {
			if !exists && w.opts.DiscoverUnknown {
				return RepoState{Status: StatusPending, Active: active, AccountStatus: status, Refetch: RefetchDiscovered, NextAttemptUS: now}, true
			}
			if !exists || !cur.Active {
				return cur, false
			}
			if cur.Refetch == RefetchNone {
				cur.Refetch = RefetchSync
			}
			cur.NextAttemptUS = now
			return cur, true
		}
		w.opts.Metrics.chainBreak()
		u.Repos = append(u.Repos, RepoUpdate{DID: h.did, Func: mark})
	}
}

// ratchetCacheMax bounds the writer's cache of rev/ values (durableCache).
const ratchetCacheMax = 1 << 18

// ratchet returns the account's archived rev ("" when it has none).
func (w *Writer) ratchet(did string) (string, error) {
	if r, ok := w.revs[did]; ok {
		return r, nil
	}
	if r, found, absent := w.revCache.get(did); found || absent {
		return r, nil
	}
	r, err := w.store.Rev(did)
	if errors.Is(err, ErrNotFound) {
		r, err = "", nil
	}
	if err != nil {
		return "", err
	}
	w.revCache.put(did, r)
	return r, nil
}

// RepoCacheStates bounds the writer's cache of repo/ states (durableCache;
// about 250 bytes an account: 8 MiB at most). A bootstrap reads no repo/
// key for its first RepoCacheStates accounts, neither when it records an
// account nor when the account's job completes.
const RepoCacheStates = 1 << 15

// erasedAccount reports whether did is deleted or taken down: as an
// #account row earlier in the unit left it (erased), else as the archive
// holds it.
func (w *Writer) erasedAccount(erased map[string]bool, did string) (bool, error) {
	if gone, ok := erased[did]; ok {
		return gone, nil
	}
	rs, exists, err := w.repoState(did)
	if err != nil {
		return false, err
	}
	return exists && !rs.Active && AccountStatusPurges(rs.AccountStatus), nil
}

// repoState returns the account's repo state as of the open batch, and
// whether it has one.
func (w *Writer) repoState(did string) (RepoState, bool, error) {
	if s, ok := w.repos[did]; ok {
		return s, true, nil
	}
	if s, found, absent := w.repoMem.get(did); found || absent {
		return s, found, nil
	}
	s, err := w.store.RepoState(did)
	if errors.Is(err, ErrNotFound) {
		return RepoState{}, false, nil
	}
	if err != nil {
		return RepoState{}, false, err
	}
	w.repoMem.put(did, s)
	return s, true, nil
}

// checkReplacement refuses a replacement whose account or snapshot rev could
// not be stored, or that touches another account.
func checkReplacement(u *Unit) error {
	rp := u.Replace
	if rp == nil {
		return nil
	}
	if rp.DID == "" || len(rp.DID) > maxDID {
		return invalid("replacement of a DID of %d bytes", len(rp.DID))
	}
	if _, err := EncodeRev(rp.Rev); err != nil {
		return invalid("replacement of %s: snapshot %v", rp.DID, err)
	}
	for i := range u.Events {
		if u.Events[i].DID != rp.DID {
			return invalid("replacement of %s carries a row of %s", rp.DID, u.Events[i].DID)
		}
	}
	for i := range u.Repos {
		if u.Repos[i].DID != rp.DID {
			return invalid("replacement of %s updates repo %s", rp.DID, u.Repos[i].DID)
		}
	}
	return nil
}

// checkPutKey refuses keys only the writer's own logic may write, and seq
// cursors (they move through Unit.Cursor).
func checkPutKey(k []byte) error {
	if _, ok := cursorIndex(k); ok {
		return invalid("unit puts %q, a seq cursor: it moves through Unit.Cursor", k)
	}
	for _, p := range [][]byte{PrefixEvent, PrefixCapture, PrefixRepo, PrefixRev, PrefixHost, PrefixHostRank, PrefixRecord, PrefixTomb, PrefixDue} {
		if hasPrefix(k, p) {
			return invalid("unit puts %q, which only the writer itself writes", k)
		}
	}
	for _, own := range [][]byte{KeyCounts, KeyInstance, KeyCompaction, KeyDueIndex, KeyIndex, KeyReplayIndex} {
		if string(k) == string(own) {
			// The index markers too: a put marking an index complete
			// before its backfill ends would hide rows from every reader.
			return invalid("unit puts %q, which only the store itself writes", k)
		}
	}
	if !hasPrefix(k, PrefixCursor) && !hasPrefix(k, PrefixMeta) && !hasPrefix(k, PrefixIdent) && !hasPrefix(k, PrefixGap) && !hasPrefix(k, PrefixAudit) {
		return invalid("unit puts %q outside cursor/, meta/, ident/, gap/ and audit/", k)
	}
	return nil
}

// commitSynced commits b with a sync. Pebble reports a failed WAL write
// through its logger's Fatalf; when Options.OnFatal panics with the
// FatalError (tests), it is recovered here and returned.
func commitSynced(b *pebble.Batch) error { return commitWith(b, pebble.Sync) }

// commitWith is commitSynced with the given write options (the compaction
// pass's removal batches are not synced on their own).
func commitWith(b *pebble.Batch, o *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(*FatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return b.Commit(o)
}
