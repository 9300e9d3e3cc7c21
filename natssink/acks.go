package natssink

// This file owns the acknowledgements of one session: every publish of a
// session asks for its reply on the session's own inbox; the replies are
// parsed on the subscription's goroutine and handed to the publisher in
// batches. No future, channel or map entry per message.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ackReply is the stream's answer to one publish.
type ackReply struct {
	token uint64 // the publish number, from the reply subject
	seq   uint64 // the stream sequence the message was stored at
	dup   bool   // refused as a duplicate of an earlier message id
	err   error  // refused or undeliverable; a *fullError for want of room
}

// fullError is a refusal for want of room: the stream's limits with
// discard new, or the account's or the servers' storage.
type fullError struct{ err error }

func (f *fullError) Error() string { return f.err.Error() }
func (f *fullError) Unwrap() error { return f.err }

// msgSizeError is a refusal of a message larger than the stream's
// max_msg_size (err_code 10054): it is refused however often it is sent.
type msgSizeError struct{ err error }

func (m *msgSizeError) Error() string { return m.err.Error() }
func (m *msgSizeError) Unwrap() error { return m.err }

// errNoResponders is a publish no server took: no stream takes its
// subject, or the stream that does has no leader (only a stream's leader
// listens on its subjects). The session's failure tells which
// (publisher.leaderless).
var errNoResponders = errors.New("status 503, no responders: no stream takes the subject, or the one that does has no leader")

// errCodeMsgSize is the JetStream error code of a message over the
// stream's max_msg_size.
const errCodeMsgSize = 10054

// fullCodes are the JetStream error codes of a refusal for want of room;
// 10077 (the store failed) only with one of fullStore's descriptions.
var (
	fullCodes = map[int]bool{
		10002: true, // resource limits exceeded for account
		10023: true, // insufficient resources
		10028: true, // insufficient memory resources available
		10047: true, // insufficient storage resources available
	}
	fullStore = []string{"maximum messages exceeded", "maximum bytes exceeded", "maximum messages per subject exceeded"}
)

func isFull(code int, description string) bool {
	if fullCodes[code] {
		return true
	}
	if code == 10077 {
		for _, d := range fullStore {
			if strings.Contains(description, d) {
				return true
			}
		}
	}
	return false
}

// acks collects the replies arriving on a session's inbox.
type acks struct {
	sub  *nats.Subscription
	skip int // the inbox and its dot, before a reply's token
	mu   sync.Mutex
	in   []ackReply
	wake chan struct{} // one token: replies are waiting
}

// subscribeAcks subscribes to the replies under a fresh inbox (replies to
// an earlier session's publishes never reach this one): a publish's reply
// subject is <inbox>.<its publish number>.
func subscribeAcks(nc *nats.Conn, window int) (*acks, string, error) {
	inbox := nc.NewInbox()
	a := &acks{wake: make(chan struct{}, 1), skip: len(inbox) + 1}
	sub, err := nc.Subscribe(inbox+".*", a.receive)
	if err != nil {
		return nil, "", fmt.Errorf("subscribe to the acknowledgements: %w", err)
	}
	// Every reply must arrive: a dropped one would stall the window
	// until the ack timeout. A window of replies is a few hundred KiB.
	if err := sub.SetPendingLimits(4*window+1024, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, "", err
	}
	a.sub = sub
	return a, inbox, nil
}

func (a *acks) close() { _ = a.sub.Unsubscribe() }

func (a *acks) receive(m *nats.Msg) {
	r := parseAck(m)
	token, err := strconv.ParseUint(m.Subject[a.skip:], 10, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("reply on %s: %w", m.Subject, err)
	}
	r.token = token
	a.mu.Lock()
	a.in = append(a.in, r)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// take returns the replies received so far; buf is reused for the next.
func (a *acks) take(buf []ackReply) []ackReply {
	a.mu.Lock()
	out := a.in
	a.in = buf[:0]
	a.mu.Unlock()
	return out
}

var (
	ackSeq       = []byte(`"seq":`)
	ackDuplicate = []byte(`"duplicate":`)
	ackError     = []byte(`"error"`)
)

// parseAck reads a JetStream publish reply: {"stream":S,"seq":N} with
// "duplicate":true for a repeated message id, {"error":{…}} for a refusal,
// or a status message (503: no stream listens on the subject).
func parseAck(m *nats.Msg) ackReply {
	d := m.Data
	if len(d) == 0 {
		switch st := m.Header.Get("Status"); st {
		case "":
		case "503":
			return ackReply{err: errNoResponders}
		default:
			return ackReply{err: fmt.Errorf("status %s %s", st, m.Header.Get("Description"))}
		}
		return ackReply{err: errors.New("empty acknowledgement")}
	}
	if bytes.Contains(d, ackError) {
		var e struct {
			Error *struct {
				Code        int    `json:"code"`
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(d, &e); err != nil || e.Error == nil {
			return ackReply{err: fmt.Errorf("unreadable acknowledgement %q", d)}
		}
		err := fmt.Errorf("refused: %s (code %d, err_code %d)", e.Error.Description, e.Error.Code, e.Error.ErrCode)
		switch {
		case isFull(e.Error.ErrCode, e.Error.Description):
			err = &fullError{err}
		case e.Error.ErrCode == errCodeMsgSize:
			err = &msgSizeError{err}
		}
		return ackReply{err: err}
	}
	i := bytes.Index(d, ackSeq)
	if i < 0 {
		return ackReply{err: fmt.Errorf("unreadable acknowledgement %q", d)}
	}
	n := i + len(ackSeq)
	j := n
	for j < len(d) && d[j] >= '0' && d[j] <= '9' {
		j++
	}
	seq, err := strconv.ParseUint(string(d[n:j]), 10, 64)
	if err != nil || seq == 0 {
		return ackReply{err: fmt.Errorf("unreadable acknowledgement %q", d)}
	}
	return ackReply{seq: seq, dup: duplicate(d)}
}

// duplicate reports whether the reply says "duplicate": true (nats-server
// writes it with a space after the colon).
func duplicate(d []byte) bool {
	i := bytes.Index(d, ackDuplicate)
	if i < 0 {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(d[i+len(ackDuplicate):], " "), []byte("true"))
}
