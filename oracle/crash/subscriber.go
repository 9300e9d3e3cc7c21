package crash

// subscriber.go owns a websocket subscriber of /subscribe that stays
// connected across a kill chain: it redials while the process is down or
// not yet serving (503), resumes with its last cursor (inclusive), and
// checks on the way that nothing it held disappears or changes.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/gorilla/websocket"
)

// WireEvent is the part of the Jetstream JSON the checks read.
type WireEvent struct {
	DID    string `json:"did"`
	TimeUS int64  `json:"time_us"`
	Cursor uint64 `json:"cursor"`
	Kind   string `json:"kind"`
	Commit *struct {
		Rev        string `json:"rev"`
		Operation  string `json:"operation"`
		Collection string `json:"collection"`
		RKey       string `json:"rkey"`
		CID        string `json:"cid"`
	} `json:"commit"`
	Account *struct {
		Active bool   `json:"active"`
		Status string `json:"status"`
	} `json:"account"`
}

// FoldWire folds one Jetstream JSON event like check.Fold.Apply folds rows
// (a sync marker changes nothing: the replacement's rows follow it).
func FoldWire(f check.Fold, ev *WireEvent) {
	recs := f[ev.DID]
	if recs == nil {
		recs = map[string]string{}
		f[ev.DID] = recs
	}
	switch {
	case ev.Kind == "commit" && ev.Commit != nil:
		path := ev.Commit.Collection + "/" + ev.Commit.RKey
		if ev.Commit.Operation == "delete" {
			delete(recs, path)
		} else {
			recs[path] = ev.Commit.CID
		}
	case ev.Kind == "account" && ev.Account != nil && check.Erases(ev.Account.Status):
		clear(recs)
	}
}

// Subscriber follows ws://<listen>/subscribe from cursor 0 and keeps every
// message by cursor. Its violations are protocol breaks seen on the wire:
// a cursor that does not increase within one connection (D2), or, on a
// reconnect with cursor=last, the event it last held missing or different.
type Subscriber struct {
	url    string
	once   bool // Follow: stop at the first disconnect instead of redialing
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	msgs       map[uint64]string
	fold       check.Fold
	last       uint64
	conns      int     // connections that delivered at least the upgrade
	violations []error // wire breaks, in order
	conn       *websocket.Conn
}

// Subscribe starts a Subscriber on listen that redials until Close.
func Subscribe(listen string) *Subscriber { return startSubscriber(listen, false) }

// Follow starts a Subscriber on listen for one connection only (a fresh read
// of the archive); it stops at the first disconnect or Close.
func Follow(listen string) *Subscriber { return startSubscriber(listen, true) }

func startSubscriber(listen string, once bool) *Subscriber {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{url: "ws://" + listen + "/subscribe", once: once, cancel: cancel,
		msgs: map[uint64]string{}, fold: check.Fold{}}
	s.wg.Add(1)
	go s.run(ctx)
	return s
}

// Close stops the subscriber and waits for its goroutine.
func (s *Subscriber) Close() {
	s.cancel()
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Subscriber) run(ctx context.Context) {
	defer s.wg.Done()
	d := websocket.Dialer{HandshakeTimeout: 2 * time.Second}
	for ctx.Err() == nil {
		s.mu.Lock()
		cursor, resumed := s.last, s.last > 0
		s.mu.Unlock()
		c, _, err := d.DialContext(ctx, fmt.Sprintf("%s?includeSync=true&cursor=%d", s.url, cursor), nil)
		if err != nil { // down, starting, or 503 before steady_state
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		s.mu.Lock()
		s.conn = c
		s.conns++
		s.mu.Unlock()
		s.read(c, resumed, cursor)
		c.Close()
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
		if s.once {
			return
		}
	}
}

// read consumes one connection until it ends.
func (s *Subscriber) read(c *websocket.Conn, resumed bool, from uint64) {
	var prev uint64 // last cursor on this connection
	first := true
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		var ev WireEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			s.violate(fmt.Errorf("undecodable message %q: %w", b, err))
			return
		}
		s.mu.Lock()
		if !first && ev.Cursor <= prev {
			s.mu.Unlock()
			s.violate(fmt.Errorf("D2: cursor %d after %d within one connection", ev.Cursor, prev))
			return
		}
		if first && resumed && ev.Cursor != from {
			// The resume cursor is inclusive: the event held last must come
			// back first, identical.
			s.mu.Unlock()
			s.violate(fmt.Errorf("D1: resumed at cursor %d (inclusive) and got %d first: the event held at %d is gone", from, ev.Cursor, from))
			return
		}
		first, prev = false, ev.Cursor
		if old, ok := s.msgs[ev.Cursor]; ok {
			s.mu.Unlock()
			if old != string(b) {
				s.violate(fmt.Errorf("D1: cursor %d changed across a reconnect:\nbefore %s\nafter  %s", ev.Cursor, old, b))
				return
			}
			continue
		}
		s.msgs[ev.Cursor] = string(b)
		if ev.Cursor > s.last {
			s.last = ev.Cursor
		}
		FoldWire(s.fold, &ev)
		s.mu.Unlock()
	}
}

func (s *Subscriber) violate(err error) {
	s.mu.Lock()
	s.violations = append(s.violations, err)
	s.mu.Unlock()
}

// Last is the highest cursor held.
func (s *Subscriber) Last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Len is the number of events held.
func (s *Subscriber) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// Conns is the number of connections made so far.
func (s *Subscriber) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Err is the first wire violation seen (nil if none).
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) == 0 {
		return nil
	}
	return s.violations[0]
}

// Messages is a copy of every message held, by cursor.
func (s *Subscriber) Messages() map[uint64]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[uint64]string, len(s.msgs))
	for k, v := range s.msgs {
		m[k] = v
	}
	return m
}

// Fold is a copy of the fold of the messages held.
func (s *Subscriber) Fold() check.Fold {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := make(check.Fold, len(s.fold))
	for did, recs := range s.fold {
		m := make(map[string]string, len(recs))
		for k, v := range recs {
			m[k] = v
		}
		f[did] = m
	}
	return f
}

// WaitFor waits until the subscriber holds cursor tip or within passes.
func (s *Subscriber) WaitFor(tip uint64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for s.Last() < tip {
		if err := s.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("crash: subscriber at cursor %d of %d after %v", s.Last(), tip, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s.Err()
}

// wireRow is the row a Jetstream message describes, as far as compaction's
// rule reads it (kind, account, record, account status).
func wireRow(cursor uint64, msg string) (archive.Event, error) {
	var ev WireEvent
	if err := json.Unmarshal([]byte(msg), &ev); err != nil {
		return archive.Event{}, fmt.Errorf("crash: cursor %d: %w", cursor, err)
	}
	row := archive.Event{Seq: cursor, DID: ev.DID}
	switch {
	case ev.Kind == "commit" && ev.Commit != nil:
		row.Collection, row.RKey = ev.Commit.Collection, ev.Commit.RKey
		row.Kind = map[string]archive.Kind{"create": archive.KindCreate, "update": archive.KindUpdate, "delete": archive.KindDelete}[ev.Commit.Operation]
	case ev.Kind == "account" && ev.Account != nil:
		row.Kind, row.Status = archive.KindAccount, ev.Account.Status
	case ev.Kind == "sync":
		row.Kind = archive.KindSync
	default:
		row.Kind = archive.KindIdentity
	}
	return row, nil
}

// CompareHeldCompacted is CompareHeld over an archive that compaction may
// have thinned since the messages were held: a held message missing from
// after is accepted only when compaction explains it (check.Vanished over
// both reads: a row below the watermark w supersedes it); every other
// check of CompareHeld stands.
func CompareHeldCompacted(held, after map[uint64]string, w uint64) error {
	var before, kept []archive.Event
	missing := false
	for k, msg := range held {
		ev, err := wireRow(k, msg)
		if err != nil {
			return err
		}
		before = append(before, ev)
		if _, ok := after[k]; !ok {
			missing = true
		}
	}
	if !missing {
		return CompareHeld(held, after)
	}
	rest := make(map[uint64]string, len(held))
	for k, msg := range held {
		if _, ok := after[k]; ok {
			rest[k] = msg
		}
	}
	if err := CompareHeld(rest, after); err != nil {
		return err
	}
	for k, msg := range after {
		ev, err := wireRow(k, msg)
		if err != nil {
			return err
		}
		kept = append(kept, ev)
	}
	if lost := check.Vanished(before, kept, w); len(lost) > 0 {
		slices.Sort(lost)
		return fmt.Errorf("D1: cursor %d was handed to a subscriber and is gone, and no row below the compaction watermark %d supersedes it", lost[0], w)
	}
	return nil
}

// Superseded returns the cursors of messages that a compaction to w must
// have removed: rows that check.Survivors, over the messages and rows (a
// later read of the store), says a row below w supersedes. A replay that
// began after the watermark reached w must never have been sent them.
func Superseded(msgs map[uint64]string, rows []archive.Event, w uint64) ([]uint64, error) {
	bySeq := make(map[uint64]archive.Event, len(rows)+len(msgs))
	for _, ev := range rows {
		bySeq[ev.Seq] = ev
	}
	for k, msg := range msgs {
		ev, err := wireRow(k, msg)
		if err != nil {
			return nil, err
		}
		bySeq[k] = ev
	}
	all := make([]archive.Event, 0, len(bySeq))
	for _, ev := range bySeq {
		all = append(all, ev)
	}
	slices.SortFunc(all, func(a, b archive.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	keep := check.Survivors(all, w)
	var out []uint64
	for k := range msgs {
		if !keep[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CompareHeld checks that every message held before (a snapshot, e.g. the
// messages a subscriber had at a kill, or all it ever held) is present and
// byte-identical in after (a fresh read from cursor 0), and that after has
// no cursor inside [min, max] of held that held lacks (no gap across a
// reconnect). It returns the first difference.
func CompareHeld(held, after map[uint64]string) error {
	if len(held) == 0 {
		return nil
	}
	keys := make([]uint64, 0, len(held))
	for k := range held {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		got, ok := after[k]
		if !ok {
			return fmt.Errorf("D1: cursor %d was handed to a subscriber and is gone", k)
		}
		if got != held[k] {
			return fmt.Errorf("D1: cursor %d changed:\nheld  %s\nafter %s", k, held[k], got)
		}
	}
	lo, hi := keys[0], keys[len(keys)-1]
	for k := range after {
		if k >= lo && k <= hi {
			if _, ok := held[k]; !ok {
				return fmt.Errorf("D1/D2: the subscriber followed cursors %d..%d across reconnects but never got %d", lo, hi, k)
			}
		}
	}
	return nil
}
