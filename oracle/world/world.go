package world

// world.go owns the World: Build, the read API (snapshots, CARs, ground
// truth) and the lower-level mutators. Locking: the account list and DID
// index are fixed at Build and read without locks; each account's mutable
// state is guarded by its own mutex, held for the whole of a read or a
// mutation, so a reader sees the state before or after an event, never
// between.

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
)

// World is a deterministic simulated atproto network. It is safe for
// concurrent use.
type World struct {
	cfg    Config
	byIdx  []*account // build order (index = account number)
	sorted []*account // sorted by DID
	byDID  map[string]*account
	dids   []string // byIdx DIDs, for record subjects
}

// Build creates the world deterministically from cfg: the same Seed gives
// the same DIDs, keys, handles, hosts, statuses and record CIDs (commit revs
// and signatures come from the wall clock and differ between builds). It
// fans out over GOMAXPROCS goroutines and waits for them.
func Build(cfg Config) (*World, error) {
	if cfg.Accounts < 0 || cfg.RecordsMean < 0 || cfg.Hosts < 0 || cfg.WebDIDs < 0 || cfg.WebDIDs > cfg.Accounts {
		return nil, fmt.Errorf("%w: negative field in %+v", ErrInvalidConfig, cfg)
	}
	if cfg.Hosts == 0 {
		cfg.Hosts = 1
	}
	n := cfg.Accounts
	w := &World{
		cfg:   cfg,
		byIdx: make([]*account, n),
		byDID: make(map[string]*account, n),
		dids:  make([]string, n),
	}
	for i := range w.dids {
		w.dids[i] = deriveDID(cfg.Seed, i)
		if i >= n-cfg.WebDIDs {
			w.dids[i] = "did:web:" + WebHost(i)
		}
	}
	sizes := deriveSizes(cfg)

	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	workers := min(runtime.GOMAXPROCS(0), max(n/64, 1))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				a, err := w.buildAccount(i, sizes[i])
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(n)) // stop the other workers early
					return
				}
				w.byIdx[i] = a
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	w.sorted = make([]*account, n)
	copy(w.sorted, w.byIdx)
	sort.Slice(w.sorted, func(i, j int) bool { return w.sorted[i].did < w.sorted[j].did })
	for _, a := range w.byIdx {
		if _, dup := w.byDID[a.did]; dup {
			return nil, fmt.Errorf("%w: seed %d derives duplicate DID %s", ErrInvalidConfig, cfg.Seed, a.did)
		}
		w.byDID[a.did] = a
	}
	return w, nil
}

// buildAccount derives account idx and builds its initial repo of size records.
func (w *World) buildAccount(idx, size int) (*account, error) {
	seed := w.cfg.Seed
	meta := newRNG(seed, saltMeta, uint64(idx))
	a := &account{
		idx:      idx,
		did:      w.dids[idx],
		handle:   deriveHandle(meta, idx),
		host:     deriveHost(meta, idx, w.cfg.Hosts),
		status:   deriveStatus(meta, idx, w.cfg.Accounts),
		revClock: syntax.NewTIDClock(uint(idx % 1024)),
		rng:      newRNG(seed, saltMutate, uint64(idx)),
	}
	a.buildStatus = a.status
	priv, err := deriveKey(seed, idx)
	if err != nil {
		return nil, err
	}
	pub, err := priv.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("world: public key %d: %w", idx, err)
	}
	a.priv, a.pubMB = priv, pub.Multibase()

	content := newRNG(seed, saltContent, uint64(idx))
	a.lt = newLogicalTime(content)
	if a.status == StatusDeleted {
		a.clear()
		return a, nil
	}
	if err := a.newRepo(genRepoRecords(recordGen{rng: content, dids: w.dids, lt: &a.lt}, size)); err != nil {
		return nil, fmt.Errorf("world: build %s: %w", a.did, err)
	}
	return a, nil
}

// genRepoRecords generates the contents of a repo of n records: usually a
// profile, then records spread over up to a year of logical time.
func genRepoRecords(g recordGen, n int) []genRecord {
	recs := make([]genRecord, 0, n)
	if n > 0 && g.rng.IntN(100) < 85 {
		g.advance(1e6)
		recs = append(recs, g.make(colProfile))
	}
	step := min(int64(3*3600*1e6), int64(365*24*3600*1e6)/int64(n+1))
	for len(recs) < n {
		recs = append(recs, g.next(2*step))
	}
	return recs
}

// Config returns the configuration the world was built from (Hosts 0 reads
// as 1).
func (w *World) Config() Config { return w.cfg }

// Accounts returns a snapshot of every account ever created (including
// deleted ones), sorted by DID. Each account is read atomically; the list as
// a whole is not one atomic snapshot while traffic runs.
func (w *World) Accounts() []Account {
	out := make([]Account, len(w.sorted))
	for i, a := range w.sorted {
		a.mu.Lock()
		out[i] = a.snapshot()
		a.mu.Unlock()
	}
	return out
}

// LiveRecords counts the records in the current repos of every account
// that is neither deleted nor taken down: what an archive that honours
// deletes must still hold (a deactivated or suspended account's records
// stay).
func (w *World) LiveRecords() int64 {
	var n int64
	for _, a := range w.sorted {
		a.mu.Lock()
		if a.status != StatusDeleted && a.status != StatusTakendown {
			n += int64(a.nrec)
		}
		a.mu.Unlock()
	}
	return n
}

// Account returns a snapshot of one account.
func (w *World) Account(did string) (Account, bool) {
	a, ok := w.byDID[did]
	if !ok {
		return Account{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapshot(), true
}

// HandleDID returns the DID of the account whose current handle is handle
// (compared case-insensitively), deleted accounts excluded: what the
// handle's /.well-known/atproto-did answers. A scan of every account.
func (w *World) HandleDID(handle string) (string, bool) {
	for _, a := range w.sorted {
		a.mu.Lock()
		ok := a.status != StatusDeleted && strings.EqualFold(a.handle, handle)
		a.mu.Unlock()
		if ok {
			return a.did, true
		}
	}
	return "", false
}

// RepoCAR returns the account's current repo as CAR v1 bytes and the
// account snapshot it belongs to. The bytes are built on first request after
// a change and cached; callers must not modify them. Inactive accounts still
// return their repo (status handling is the server's job); a deleted account
// has none and returns ErrAccountDeleted with its snapshot; an unknown DID
// returns ErrUnknownDID.
func (w *World) RepoCAR(did string) ([]byte, Account, error) {
	a, ok := w.byDID[did]
	if !ok {
		return nil, Account{}, fmt.Errorf("world: repo car %s: %w", did, ErrUnknownDID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	snap := a.snapshot()
	if a.status == StatusDeleted {
		return nil, snap, fmt.Errorf("world: repo car %s: %w", did, ErrAccountDeleted)
	}
	b, err := a.exportCAR()
	if err != nil {
		return nil, snap, err
	}
	return b, snap, nil
}

// Records returns the ground truth "collection/rkey" -> record CID of the
// account's current repo: empty for a deleted account, nil for an unknown DID.
func (w *World) Records(did string) map[string]cid.Cid {
	a, ok := w.byDID[did]
	if !ok {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.records()
}

// RecordBytes returns the current DAG-CBOR of one record.
func (w *World) RecordBytes(did, path string) ([]byte, bool) {
	a, ok := w.byDID[did]
	if !ok {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.recordCID(path)
	if c == nil {
		return nil, false
	}
	return a.bs.get(*c)
}

func (w *World) lookup(did string) (*account, error) {
	a, ok := w.byDID[did]
	if !ok {
		return nil, fmt.Errorf("world: %s: %w", did, ErrUnknownDID)
	}
	return a, nil
}

// writable reports why the account cannot commit, if it cannot.
func (a *account) writable() error {
	switch a.status {
	case StatusActive:
		return nil
	case StatusDeleted:
		return fmt.Errorf("world: %s: %w", a.did, ErrAccountDeleted)
	}
	return fmt.Errorf("world: %s is %s: %w", a.did, a.status, ErrAccountInactive)
}

func now() string { return syntax.DatetimeNow().String() }

// action of a pending write, checked against the tree before committing.
const (
	actCreate = "create"
	actUpdate = "update"
	actDelete = "delete"
)

type pendingWrite struct {
	action string
	path   string
	rec    []byte // nil for delete
}

// applyWrites validates writes against the current repo and commits them as
// one #commit. The account's mutex must be held.
func (a *account) applyWrites(ws []pendingWrite) (Event, error) {
	if err := a.writable(); err != nil {
		return Event{}, err
	}
	ops := make([]writeOp, len(ws))
	seen := make(map[string]struct{}, len(ws))
	for i, wr := range ws {
		if _, dup := seen[wr.path]; dup {
			return Event{}, fmt.Errorf("world: %s: duplicate path %s in one commit", a.did, wr.path)
		}
		seen[wr.path] = struct{}{}
		cur := a.recordCID(wr.path)
		switch wr.action {
		case actCreate:
			if cur != nil {
				return Event{}, fmt.Errorf("world: create %s/%s: %w", a.did, wr.path, ErrRecordExists)
			}
		case actUpdate, actDelete:
			if cur == nil {
				return Event{}, fmt.Errorf("world: %s %s/%s: %w", wr.action, a.did, wr.path, ErrRecordNotFound)
			}
			if wr.action == actUpdate {
				c, err := dagCBORPrefix.Sum(wr.rec)
				if err != nil {
					return Event{}, fmt.Errorf("world: record cid: %w", err)
				}
				if c == *cur {
					return Event{}, fmt.Errorf("world: update %s/%s: %w", a.did, wr.path, ErrUnchanged)
				}
			}
		default:
			return Event{}, fmt.Errorf("world: unknown write action %q", wr.action)
		}
		ops[i] = writeOp{path: wr.path, rec: wr.rec}
	}
	body, err := a.commit(ops, now())
	if err != nil {
		return Event{}, err
	}
	return Event{DID: a.did, Commit: body}, nil
}

// CreateRecord creates a record at collection/rkey and returns its #commit;
// rkey "" takes the account's next TID. ErrRecordExists if the path is taken.
func (w *World) CreateRecord(did, collection, rkey string, rec map[string]any) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	if _, err := syntax.ParseNSID(collection); err != nil {
		return Event{}, fmt.Errorf("world: create: %w", err)
	}
	if rkey != "" {
		if _, err := syntax.ParseRecordKey(rkey); err != nil {
			return Event{}, fmt.Errorf("world: create: %w", err)
		}
	}
	b, err := marshalRecord(rec)
	if err != nil {
		return Event{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if rkey == "" {
		a.lt.tcur += 1e6
		rkey = syntax.NewTID(a.lt.tcur, a.lt.clockID).String()
	}
	return a.applyWrites([]pendingWrite{{action: actCreate, path: collection + "/" + rkey, rec: b}})
}

// UpdateRecord replaces the record at path ("collection/rkey") and returns
// its #commit. ErrRecordNotFound if absent, ErrUnchanged if identical.
func (w *World) UpdateRecord(did, path string, rec map[string]any) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	if _, _, err := syntax.ParseRepoPath(path); err != nil {
		return Event{}, fmt.Errorf("world: update: %w", err)
	}
	b, err := marshalRecord(rec)
	if err != nil {
		return Event{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applyWrites([]pendingWrite{{action: actUpdate, path: path, rec: b}})
}

// DeleteRecord deletes the record at path and returns its #commit.
// ErrRecordNotFound if absent.
func (w *World) DeleteRecord(did, path string) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	if _, _, err := syntax.ParseRepoPath(path); err != nil {
		return Event{}, fmt.Errorf("world: delete: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applyWrites([]pendingWrite{{action: actDelete, path: path}})
}

// SetHandle changes the account's handle and returns an #identity event.
// Inactive accounts may change handle; deleted ones may not.
func (w *World) SetHandle(did, handle string) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	h, err := syntax.ParseHandle(handle)
	if err != nil {
		return Event{}, fmt.Errorf("world: set handle: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.setHandle(h.String())
}

func (a *account) setHandle(h string) (Event, error) {
	if a.status == StatusDeleted {
		return Event{}, fmt.Errorf("world: set handle %s: %w", a.did, ErrAccountDeleted)
	}
	a.handle = h
	return Event{DID: a.did, Identity: identityBody(a.did, h)}, nil
}

// RotateKey gives the account a new signing key (derived from the seed and
// the rotation count) and returns an #identity event, as a PLC operation
// would: the DID document names the new key from now on and every later
// commit is signed with it. Deleted accounts may not rotate.
func (w *World) RotateKey(did string) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status == StatusDeleted {
		return Event{}, fmt.Errorf("world: rotate key %s: %w", a.did, ErrAccountDeleted)
	}
	a.keyGen++
	priv, err := deriveKey(w.cfg.Seed^int64(a.keyGen)<<40, a.idx)
	if err != nil {
		return Event{}, err
	}
	pub, err := priv.PublicKey()
	if err != nil {
		return Event{}, fmt.Errorf("world: rotate key %s: %w", a.did, err)
	}
	a.priv, a.pubMB = priv, pub.Multibase()
	return Event{DID: a.did, Identity: identityBody(a.did, a.handle)}, nil
}

// MoveHost moves the account to PDS host `host` (a migration: its DID
// document names that host's endpoint from now on, and that host serves
// its repo) and returns an #identity event. Deleted accounts may not move.
func (w *World) MoveHost(did string, host int) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	if host < 0 || host >= w.cfg.Hosts {
		return Event{}, fmt.Errorf("world: move %s: no host %d (the world has %d)", did, host, w.cfg.Hosts)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status == StatusDeleted {
		return Event{}, fmt.Errorf("world: move %s: %w", a.did, ErrAccountDeleted)
	}
	a.host = host
	return Event{DID: a.did, Identity: identityBody(a.did, a.handle)}, nil
}

// SetStatus changes the account's status and returns an #account event.
// StatusActive reactivates; StatusDeleted is final (the repo is dropped and
// every later mutation returns ErrAccountDeleted).
func (w *World) SetStatus(did, status string) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	switch status {
	case StatusActive, StatusDeactivated, StatusTakendown, StatusSuspended, StatusDeleted:
	default:
		return Event{}, fmt.Errorf("world: set status %q: %w", status, ErrInvalidStatus)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.setStatus(status)
}

func (a *account) setStatus(status string) (Event, error) {
	if a.status == StatusDeleted {
		return Event{}, fmt.Errorf("world: set status %s: %w", a.did, ErrAccountDeleted)
	}
	a.status = status
	if status == StatusDeleted {
		a.clear()
	}
	return Event{DID: a.did, Account: accountBody(a.did, status)}, nil
}

// ResetRepo replaces the account's repo with `records` freshly generated
// records under a new signed commit and returns a #sync event whose blocks
// are a CAR holding just that commit. The account must be active.
func (w *World) ResetRepo(did string, records int) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	if records < 0 {
		return Event{}, fmt.Errorf("world: reset %s: negative record count", did)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reset(recordGen{rng: a.rng, dids: w.dids, lt: &a.lt}, records)
}

func (a *account) reset(g recordGen, records int) (Event, error) {
	if err := a.writable(); err != nil {
		return Event{}, err
	}
	if err := a.newRepo(genRepoRecords(g, records)); err != nil {
		return Event{}, err
	}
	return a.syncEvent()
}

// syncEvent is the account's #sync event for its current head.
func (a *account) syncEvent() (Event, error) {
	body, err := a.syncBody(now())
	if err != nil {
		return Event{}, err
	}
	return Event{DID: a.did, Sync: body}, nil
}

// Resync returns a #sync event of the account's current repo without
// changing it: what a relay sends when consumers must fetch the repo again
// (commits it never relayed, a PDS migration). Changes made to the world
// without emitting their events and then a Resync model a reset that
// changed exactly those records. The account must be active.
func (w *World) Resync(did string) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.writable(); err != nil {
		return Event{}, err
	}
	return a.syncEvent()
}

var errNoTarget = errors.New("world: no target")
