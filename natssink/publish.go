package natssink

// This file owns one session of the sink: find or create the stream, read
// where it ends, and publish the archive from there with a bounded window
// of unacknowledged messages, until an error.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/subscribe"
)

// HeaderDID carries the event's DID.
const HeaderDID = "Backstream-Did"

// readBatch bounds the events read per turn of the loop.
const readBatch = 512

// iterSpan bounds the events one store iterator reads, and iterMaxAge how
// long the sink holds one (as the merge walk does): an iterator pins every
// table it sees, so one held while the cluster acknowledges slowly would
// keep on disk every table compacted away meanwhile.
const (
	iterSpan   = 1 << 16
	iterMaxAge = 10 * time.Second
)

// inflight is a published event waiting for its acknowledgement.
type inflight struct {
	seq   uint64    // archive seq
	sent  time.Time // when the turn that published it began
	bytes int       // the message body
}

type publisher struct {
	sink *Sink
	nc   *nats.Conn
	js   jetstream.JetStream // stream lookup and creation, the last message

	next   uint64 // the archive seq to publish next
	expect uint64 // the stream sequence the next publish must follow
	stored uint64 // the stream sequence of the last acknowledged publish
	base   uint64 // the stream sequence of the message resume read (0: none)
	// resumed is the stream's state as resume read it.
	resumed jetstream.StreamState
	// maxMsgSize is the stream's max_msg_size as the session found it.
	maxMsgSize int64
	// storedSeq is stored, for the purge watch; firstAck is closed at
	// the session's first acknowledgement.
	storedSeq atomic.Uint64
	firstAck  chan struct{}
	// purged: the stream was emptied behind the session.
	purged <-chan *purgedError
	// idle: the session found nothing to publish before its first
	// acknowledgement, and shows publishing.
	idle bool
	// Publishes of this session are numbered from 0 (a reply's token):
	// sent were made, the first done are acknowledged, and publish k
	// waits in q[k % Window]. Publish done+i must be stored at stream
	// sequence stored+1+i.
	q          []inflight
	sent, done uint64
	acks       *acks
	replies    []ackReply
	// Reused for every publish: a message, its headers, its reply
	// subject and the body of an event rendered here.
	msg                       nats.Msg
	hID, hDID, hExpect, hLast []string
	last                      uint64 // the archive seq of the session's last publish
	reply, body               []byte // reply: <inbox>. and the token
	inboxLen                  int    // of reply's <inbox>.
	now                       time.Time

	rend     subscribe.Renderer
	ents     []*archive.LiveEntry
	it       *archive.EventIter // reading the store below itEnd
	itEnd    uint64
	itOpened time.Time // by the sink's clock
	// stuck: an event the servers' max_payload refuses; nothing more is
	// published, and the session ends with it once the window is
	// acknowledged.
	stuck *tooLargeError
}

// tooLargeError: an event's message is larger than the servers'
// max_payload, or than the stream's max_msg_size (which the stream
// refuses it for). It can never be published as it is: the sink stops at
// it (never skipping it) until the operator raises that limit.
type tooLargeError struct {
	seq        uint64
	bytes      int   // the message body (headers not counted)
	maxPayload int64 // the connected server's max_payload (0: the stream's limit)
	maxMsgSize int64 // the stream's max_msg_size, when it refused the event
}

func (e *tooLargeError) Error() string {
	if e.maxPayload == 0 {
		return fmt.Sprintf("event seq %d is %d bytes plus headers, over the stream's max_msg_size of %d bytes: the sink stops at it until max_msg_size is raised",
			e.seq, e.bytes, e.maxMsgSize)
	}
	return fmt.Sprintf("event seq %d is %d bytes plus headers, over the NATS servers' max_payload of %d bytes: the sink stops at it until max_payload is raised",
		e.seq, e.bytes, e.maxPayload)
}

func (p *publisher) session(ctx context.Context) error {
	s := p.sink
	s.sessionState(StateConnecting)
	stream, err := p.ensureStream(ctx)
	if err != nil {
		return p.failed(ctx, errStream, err)
	}
	p.maxMsgSize = int64(stream.CachedInfo().Config.MaxMsgSize)
	if err := p.resume(ctx, stream); err != nil {
		return err
	}
	a, inbox, err := subscribeAcks(p.nc, s.cfg.Window)
	if err != nil {
		s.fail(errPublish, err)
		return err
	}
	defer a.close()
	p.acks = a
	p.reply = append(append(p.reply[:0], inbox...), '.')
	p.inboxLen = len(p.reply)
	p.hID, p.hDID, p.hExpect, p.hLast = make([]string, 1), make([]string, 1), make([]string, 1), make([]string, 1)
	p.msg.Header = nats.Header{nats.MsgIdHdr: p.hID, HeaderDID: p.hDID, nats.ExpectedLastSeqHdr: p.hExpect}
	// The state stays connecting until the stream acknowledges the
	// session's first publish (ack), or the session finds nothing to
	// publish (run): a stream that refuses or loses every publish never
	// shows publishing.
	p.rend = subscribe.Renderer{Cursor: true}
	p.q = make([]inflight, s.cfg.Window)
	defer p.closeIter()
	p.firstAck = make(chan struct{})
	purged, stop := p.watchPurge(ctx, stream, p.resumed, p.base, p.firstAck)
	defer stop()
	p.purged = purged
	err = p.run(ctx)
	var fatal *fatalError
	var full *fullError
	var big *tooLargeError
	var emptied *purgedError
	switch {
	case errors.As(err, &fatal) || ctx.Err() != nil:
	case errors.As(err, &emptied):
		s.foundPurged(emptied)
	case errors.As(err, &full):
		s.fail(errFull, err)
	case errors.As(err, &big):
		s.fail(errTooLarge, err)
	default:
		err = p.failed(ctx, errPublish, err)
	}
	return err
}

// noLeaderError is a session's failure while the stream, or the servers'
// JetStream, had no leader: its replicas electing one, or fewer than a
// quorum of them up. Only a stream's leader listens on its subjects and
// answers for it, so every step of a session fails then, each its own
// way (no responders, a timeout, "JetStream system temporarily
// unavailable"); the status says what they have in common.
type noLeaderError struct {
	cause error
	// elected: a publish no server took though the stream takes its
	// subject, and the stream has a leader again by the time it is asked.
	elected bool
}

func (e *noLeaderError) Error() string {
	if e.elected {
		return "the stream had no leader to take a publish (its replicas were electing one; it takes the subject and has a leader again): resuming from it"
	}
	return "the stream has no leader (its replicas are electing one, or fewer than a quorum of them are up): waiting for one"
}

func (e *noLeaderError) Unwrap() error { return e.cause }

// errCodeNoLeader is the JetStream error code of "JetStream system
// temporarily unavailable": the servers' JetStream, or the stream's group
// of replicas, has no leader.
const errCodeNoLeader = 10008

// leaderCheckTimeout bounds the stream info asked after a failure (a
// quarter of it per request): one that goes unanswered leaves the failure
// as it is.
const leaderCheckTimeout = 2 * time.Second

// failed counts a session's failure under kind (Sink.fail) and returns it,
// or in its place a *noLeaderError when the stream had no leader.
func (p *publisher) failed(ctx context.Context, kind string, err error) error {
	if nl := p.leaderless(ctx, err); nl != nil {
		err = nl
	}
	p.sink.fail(kind, err)
	return err
}

// leaderless tells whether a failure of the session came from the stream
// having no leader: the servers said so (errCodeNoLeader), or a stream
// info, asked now, says so (any replica answers it once the stream has
// been without a leader for a while), or names a leader without a quorum
// of the stream's replicas up (quorate), or a publish no server took (no
// responders) although the stream takes its subject, or the stream was
// shown without a leader and the info goes unanswered. Nil when nothing
// says so for certain (an info unanswered too, the stream shown with a
// leader before), the failure then shown as it is.
func (p *publisher) leaderless(ctx context.Context, cause error) *noLeaderError {
	if ctx.Err() != nil {
		return nil
	}
	if isNoLeader(cause) {
		return &noLeaderError{cause: cause}
	}
	if !p.nc.IsConnected() {
		return nil // the servers out of reach: nothing to ask
	}
	// Asked again until answered, within the bound: a request that
	// reaches the servers while no replica answers for the stream (an
	// election's first moments) is never answered.
	var stream jetstream.Stream
	var err error
	for deadline := time.Now().Add(min(p.sink.cfg.AckTimeout, leaderCheckTimeout)); ; {
		cctx, cancel := context.WithTimeout(ctx, leaderCheckTimeout/4)
		stream, err = p.js.Stream(cctx, p.sink.cfg.Stream)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
	}
	switch {
	case isNoLeader(err):
		return &noLeaderError{cause: cause}
	case errors.Is(err, context.DeadlineExceeded) && p.sink.state() == StateNoLeader:
		// Unanswered while the stream is shown without a leader: nothing
		// says it has one again (a loaded replica answers late), and the
		// state would flip to retrying and back with each check.
		return &noLeaderError{cause: cause}
	case err != nil:
		return nil
	}
	info := stream.CachedInfo()
	switch {
	case info.Cluster != nil && (info.Cluster.Leader == "" || !quorate(info.Cluster)):
		return &noLeaderError{cause: cause}
	case errors.Is(cause, errNoResponders) && takes(info.Config.Subjects, p.want().Subjects[0]):
		return &noLeaderError{cause: cause, elected: true}
	}
	return nil
}

// quorate reports whether the stream's leader, as its info names it, has a
// quorum of the stream's replicas up (itself among them): the servers of
// the others not known offline. A leader whose replicas' servers went away
// goes on answering for the stream as its leader, reads included, until it
// notices it lost its quorum (about ten seconds), but stores nothing: every
// publish goes unanswered.
func quorate(ci *jetstream.ClusterInfo) bool {
	up := 1 // the leader, which the info comes from
	for _, r := range ci.Replicas {
		if r != nil && !r.Offline {
			up++
		}
	}
	return up > (len(ci.Replicas)+1)/2
}

// isNoLeader reports whether err is the servers' "JetStream system
// temporarily unavailable".
func isNoLeader(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeNoLeader
}

// want is the config of a stream the sink creates.
func (p *publisher) want() jetstream.StreamConfig {
	c := p.sink.cfg
	replicas := c.Replicas
	if replicas == 0 {
		replicas = 1
		if len(p.nc.Servers()) >= 3 {
			replicas = 3
		}
	}
	return jetstream.StreamConfig{
		Name:       c.Stream,
		Subjects:   []string{c.Stream + ".>"},
		Storage:    jetstream.FileStorage,
		Replicas:   replicas,
		Duplicates: c.DuplicateWindow,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
	}
}

// ensureStream finds the stream, or creates it; an existing stream's
// differences from want are reported, never changed.
func (p *publisher) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	s := p.sink
	want := p.want()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout)
	defer cancel()
	stream, err := p.js.Stream(cctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = p.js.CreateStream(cctx, want)
		if err == nil {
			s.log.Info("created the NATS stream", "stream", want.Name, "replicas", want.Replicas, "duplicate_window", want.Duplicates)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	p.showConfig(stream.CachedInfo().Config)
	return stream, nil
}

// showConfig reports how the stream's config got differs from the one the
// sink would create (Status.ConfigDiffs, the mismatch gauge, a warning when
// the differences change): at each session's start, and at each look of the
// purge watch, so an operator's fix of the stream while a session runs is
// seen without a new session.
func (p *publisher) showConfig(got jetstream.StreamConfig) {
	s := p.sink
	want := p.want()
	diffs := configDiffs(want, got, s.cfg.Replicas != 0)
	s.mu.Lock()
	old := s.status.ConfigDiffs
	s.status.ConfigDiffs = diffs
	s.mu.Unlock()
	s.cfg.Metrics.configMismatch(len(diffs) > 0)
	if len(diffs) > 0 && fmt.Sprint(old) != fmt.Sprint(diffs) {
		s.log.Warn("the NATS stream's config differs from the sink's; it is used as it is", "stream", want.Name, "differences", diffs)
	}
}

// configDiffs says how got differs from want in what the sink relies on.
func configDiffs(want, got jetstream.StreamConfig, replicasSet bool) []string {
	var d []string
	if !takes(got.Subjects, want.Subjects[0]) {
		d = append(d, fmt.Sprintf("subjects %v do not include %s (publishes will fail)", got.Subjects, want.Subjects[0]))
	}
	if got.Storage != want.Storage {
		d = append(d, fmt.Sprintf("storage %s, want %s", got.Storage, want.Storage))
	}
	if replicasSet && got.Replicas != want.Replicas {
		d = append(d, fmt.Sprintf("replicas %d, want %d", got.Replicas, want.Replicas))
	}
	if got.Duplicates < want.Duplicates {
		d = append(d, fmt.Sprintf("duplicate window %s, want at least %s", got.Duplicates, want.Duplicates))
	}
	if got.MaxMsgSize > 0 {
		d = append(d, fmt.Sprintf("max_msg_size %d refuses larger events: the sink stops at one (state too_large)", got.MaxMsgSize))
	}
	remove, refuse := limits(got)
	if len(remove) > 0 {
		d = append(d, fmt.Sprintf("limits (%s) remove published events", strings.Join(remove, ", ")))
	}
	if len(refuse) > 0 {
		d = append(d, fmt.Sprintf("limits (%s) with discard new refuse events once reached: the sink then waits, state full", strings.Join(refuse, ", ")))
	}
	return d
}

// takes reports whether a stream with subjects takes the sink's, want
// (<stream>.>).
func takes(subjects []string, want string) bool {
	for _, sub := range subjects {
		if sub == want || sub == ">" {
			return true
		}
	}
	return false
}

// limits names the stream's limits that remove stored messages and those
// that refuse new ones, as nats-server enforces them: max_age always
// removes; max_msgs and max_bytes refuse with discard new; and
// max_msgs_per_subject refuses only with discard new and
// discard_new_per_subject both, else it removes the subject's oldest. A
// retention other than limits removes too: a message goes once its
// consumers have it (at once, with interest retention and no consumer).
func limits(c jetstream.StreamConfig) (remove, refuse []string) {
	if c.MaxAge > 0 {
		remove = append(remove, "max_age")
	}
	if c.Retention != jetstream.LimitsPolicy {
		remove = append(remove, strings.ToLower(c.Retention.String())+" retention")
	}
	for _, l := range []struct {
		name string
		set  bool
		new  bool
	}{
		{"max_msgs", c.MaxMsgs > 0, c.Discard == jetstream.DiscardNew},
		{"max_bytes", c.MaxBytes > 0, c.Discard == jetstream.DiscardNew},
		{"max_msgs_per_subject", c.MaxMsgsPerSubject > 0, c.Discard == jetstream.DiscardNew && c.DiscardNewPerSubject},
	} {
		switch {
		case !l.set:
		case l.new:
			refuse = append(refuse, l.name)
		default:
			remove = append(remove, l.name)
		}
	}
	return remove, refuse
}

// resume sets next and expect from the stream's last message: the stream,
// not the position, says what was published.
func (p *publisher) resume(ctx context.Context, stream jetstream.Stream) error {
	s := p.sink
	cctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout)
	defer cancel()
	info, err := stream.Info(cctx)
	if err != nil {
		return p.failed(ctx, errStream, fmt.Errorf("stream info: %w", err))
	}
	p.expect, p.stored, p.resumed = info.State.LastSeq, info.State.LastSeq, info.State
	if info.State.Msgs == 0 {
		s.purged.Store(false)
		p.next = p.emptyStart(info)
		s.setPosition(p.next - min(p.next, 1))
		return nil
	}
	if s.purged.Load() {
		err := fmt.Errorf("the stream was purged while the sink published into it, and holds %d messages: published behind the purge, they cannot be put back in order: purge it again and the sink fills it from --nats-from (archive seq %d); kept on purpose (nats stream purge --keep or --seq, or messages removed from its front, leaving none it held a second before: the servers show the same), restart backstream and it publishes on behind them",
			info.State.Msgs, s.cfg.From)
		s.fail(errResume, err)
		return err
	}
	// The last message that still exists: the one at LastSeq may have
	// been removed (a foreign message the operator deleted). The next
	// publish still follows LastSeq, the server's.
	msg, err := p.lastMsg(cctx)
	if err != nil {
		return p.failed(ctx, errStream, fmt.Errorf("stream's last message: %w", err))
	}
	last, err := p.own(msg)
	if err != nil {
		var fatal *fatalError
		if !errors.As(err, &fatal) {
			s.fail(errResume, err)
		}
		return err
	}
	p.next, p.base = last+1, msg.Sequence
	s.setPosition(last)
	return nil
}

// emptyStart is the archive seq a session publishes first into an empty
// stream: after the removed message when an earlier session (of this run
// or one before) saw the operator remove the stream's only message and
// nothing was stored since; after the position when the stream emptied
// itself; else From (a stream never published into, or one purged).
func (p *publisher) emptyStart(info *jetstream.StreamInfo) uint64 {
	s := p.sink
	pos := s.acked.Load()
	if r := s.removal.Load(); r != nil && r.LastSeq == info.State.LastSeq && r.Created.Equal(info.Created) {
		s.log.Info("the NATS stream is empty since its only message was removed; publishing after that message",
			"stream", s.cfg.Stream, "last_sequence", r.LastSeq, "removed_seq", r.Seq)
		return max(r.Seq+1, s.cfg.From)
	}
	if pos > 0 && emptiedItself(info) {
		s.log.Info("the NATS stream is empty: its retention or max_age removed every message it held; publishing after the position",
			"stream", s.cfg.Stream, "last_sequence", info.State.LastSeq, "last_message_at", info.State.LastTime, "position", pos)
		return max(pos+1, s.cfg.From)
	}
	if pos > 0 && s.cfg.From <= pos {
		s.log.Warn("the NATS stream is empty but backstream had published up to its position: publishing again from --nats-from",
			"stream", s.cfg.Stream, "position", pos, "from", s.cfg.From)
	}
	return s.cfg.From
}

// emptiedItself reports whether an empty stream that held messages lost
// them to its own rules rather than to a purge: a retention other than
// limits (consumers took them), or max_age with its last message older
// than that by the server's clock (it would have expired, purged or not).
// Limits on count or size never empty a stream.
func emptiedItself(info *jetstream.StreamInfo) bool {
	c, st := info.Config, info.State
	switch {
	case st.LastSeq == 0:
		return false
	case c.Retention != jetstream.LimitsPolicy:
		return true
	default:
		return c.MaxAge > 0 && !info.TimeStamp.IsZero() && info.TimeStamp.Sub(st.LastTime) >= c.MaxAge
	}
}

// lastMsg is the stream's last message that still exists, whatever its
// subject. (The server answers a last-by-subject ">" with the message at
// the stream's last sequence, which may be removed; "*" and "*.>" together
// match every subject and are looked up by subject.) It is read from the
// stream's leader (lastBySubject), never by a direct get.
func (p *publisher) lastMsg(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	var last *jetstream.RawStreamMsg
	for _, filter := range []string{"*", "*.>"} {
		msg, err := lastBySubject(ctx, p.nc, p.sink.cfg.Stream, filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return nil, err
		case last == nil || msg.Sequence > last.Sequence:
			last = msg
		}
	}
	if last == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	return last, nil
}

// lastBySubject reads the stream's last message on subject (a filter) with
// the stream message get API, which the stream's leader answers. nats.go
// reads a stream that allows direct gets with a direct get instead, which
// its followers (once 90 % synchronised) and its mirrors (mirror_direct)
// answer too, from what they hold: an older last message, after which the
// sink would publish again events the stream holds.
func lastBySubject(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("last message on %s: unreadable reply %.200q: %w", subject, reply.Data, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("last message on %s: %w", subject,
			&jetstream.APIError{Code: resp.Error.Code, ErrorCode: jetstream.ErrorCode(resp.Error.ErrCode), Description: resp.Error.Description})
	case resp.Message == nil:
		return nil, fmt.Errorf("last message on %s: a reply without a message %.200q", subject, reply.Data)
	}
	m := resp.Message
	msg := &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Data: m.Data, Time: m.Time}
	if len(m.Header) > 0 {
		if msg.Header, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("last message on %s: headers: %w", subject, err)
		}
	}
	return msg, nil
}

// own returns the archive seq of msg, the stream's last message, after
// checking that the sink published it: a Backstream-Did, a Nats-Msg-Id
// that is an archive seq no later than the archive's tip, and the DID and
// subject of the archive's event at that seq (unless compaction has
// removed it since).
func (p *publisher) own(msg *jetstream.RawStreamMsg) (uint64, error) {
	s := p.sink
	foreign := func(why string) error {
		return fmt.Errorf("stream's last message %d (%s %q, subject %s) %s: is something else publishing to %s? Remove it and the sink goes on",
			msg.Sequence, nats.MsgIdHdr, msg.Header.Get(nats.MsgIdHdr), msg.Subject, why, s.cfg.Stream)
	}
	did := msg.Header.Get(HeaderDID)
	if did == "" {
		return 0, foreign("has no " + HeaderDID)
	}
	seq, err := strconv.ParseUint(msg.Header.Get(nats.MsgIdHdr), 10, 63)
	if err != nil || seq == 0 {
		return 0, foreign("has no archive seq")
	}
	if tip := s.cfg.Writer.Live().Tip(); seq > tip {
		return 0, foreign(fmt.Sprintf("is past the archive's tip %d", tip))
	}
	it, err := s.cfg.Store.Events(seq)
	if err != nil {
		return 0, &fatalError{fmt.Errorf("natssink: read the archive at %d: %w", seq, err)}
	}
	defer it.Close()
	if !it.Next() {
		if err := it.Err(); err != nil {
			return 0, &fatalError{fmt.Errorf("natssink: read the archive at %d: %w", seq, err)}
		}
		return seq, nil // compacted away: nothing to compare with
	}
	if ev := it.Event(); ev.Seq == seq && (ev.DID != did || Subject(s.cfg.Stream, ev) != msg.Subject) {
		return 0, foreign(fmt.Sprintf("is not the archive's event %d (%s, %s)", seq, ev.DID, Subject(s.cfg.Stream, ev)))
	}
	return seq, nil
}

// run publishes from p.next until an error or ctx's end.
func (p *publisher) run(ctx context.Context) error {
	live := p.sink.cfg.Writer.Live()
	timeout := time.NewTimer(p.sink.cfg.AckTimeout)
	defer timeout.Stop()
	for {
		wake := live.Wait()
		select {
		case e := <-p.purged:
			return e
		default:
		}
		if err := p.reap(); err != nil {
			return err
		}
		n, err := p.fill()
		if err != nil {
			if !errors.As(err, &p.stuck) || p.pending() == 0 {
				return err
			}
			// Let the window before it be acknowledged, so the position
			// shows where the sink stopped.
		}
		if n > 0 {
			continue
		}
		if p.pending() == 0 {
			if p.stuck != nil {
				return p.stuck
			}
			if live.Closed() {
				return &fatalError{errors.New("natssink: the archive writer stopped")}
			}
			if p.done == 0 && !p.idle {
				// Caught up before any publish: the stream holds the
				// archive to its tip.
				p.idle = true
				p.sink.sessionState(StatePublishing)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e := <-p.purged:
				return e
			case <-wake:
			}
			continue
		}
		// Nothing to publish now, or the window is full: wait for an
		// acknowledgement, a new event, or the oldest publish's deadline.
		now := p.sink.cfg.Now()
		p.expireIter(now)
		oldest := p.slot(p.done)
		left := oldest.sent.Add(p.sink.cfg.AckTimeout).Sub(now)
		if left <= 0 {
			return fmt.Errorf("publish of seq %d: no acknowledgement within %s", oldest.seq, p.sink.cfg.AckTimeout)
		}
		timeout.Reset(left)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-p.purged:
			return e
		case <-wake:
		case <-p.acks.wake:
		case <-timeout.C:
		}
	}
}

func (p *publisher) pending() int { return int(p.sent - p.done) }

// window is the publishes allowed in flight: one until the session's
// first is acknowledged, so a stream that refuses (full, or not there) is
// probed with one publish per session, not a window of them.
func (p *publisher) window() int {
	if p.done == 0 {
		return 1
	}
	return p.sink.cfg.Window
}

func (p *publisher) slot(k uint64) *inflight { return &p.q[k%uint64(len(p.q))] }

// reap takes the acknowledgements already in.
func (p *publisher) reap() error {
	rs := p.acks.take(p.replies)
	for _, r := range rs {
		if err := p.ack(r); err != nil {
			return err
		}
	}
	p.replies = rs
	return nil
}

// ack moves the position past the publish r answers, and past every
// earlier one in the window: a publish stored at stream sequence N after
// the stream's last was N-1 (its Nats-Expected-Last-Sequence) means the
// publishes before it, which chain the same way, are stored below it, in
// order, whether or not their own replies arrive.
func (p *publisher) ack(r ackReply) error {
	var size *msgSizeError
	if errors.As(r.err, &size) && r.token >= p.done && r.token < p.sent {
		in := p.slot(r.token)
		return &tooLargeError{seq: in.seq, bytes: in.bytes, maxMsgSize: p.maxMsgSize}
	}
	if r.err != nil {
		return fmt.Errorf("publish after stream sequence %d (seq %d): %w", p.stored, p.headSeq(), r.err)
	}
	if r.token < p.done {
		return nil // already covered by a later publish's acknowledgement
	}
	if r.token >= p.sent {
		return fmt.Errorf("acknowledgement of publish %d, beyond the %d sent", r.token, p.sent)
	}
	i := r.token - p.done
	in := p.slot(r.token)
	if r.dup {
		return fmt.Errorf("publish of seq %d was a duplicate (stream sequence %d): resuming from the stream", in.seq, r.seq)
	}
	if want := p.stored + 1 + i; r.seq != want {
		return fmt.Errorf("publish of seq %d stored at stream sequence %d, want %d: resuming from the stream", in.seq, r.seq, want)
	}
	if p.done == 0 {
		p.sink.publishing()
		close(p.firstAck)
	}
	p.done = r.token + 1
	p.stored = r.seq
	// The archive seq before the stream sequence: the purge watch reads
	// them the other way round (Sink.removed).
	p.sink.acked.Store(in.seq)
	p.storedSeq.Store(r.seq)
	p.sink.cfg.Metrics.acked(int(i)+1, in.seq)
	return nil
}

// headSeq is the archive seq of the oldest unacknowledged publish, or the
// next to publish.
func (p *publisher) headSeq() uint64 {
	if p.pending() > 0 {
		return p.slot(p.done).seq
	}
	return p.next
}

// fill publishes what the window has room for: from the store below the
// live log's floor, from the live log (sharing its rendering) above.
func (p *publisher) fill() (int, error) {
	room := min(p.window()-p.pending(), readBatch)
	if room <= 0 || p.stuck != nil {
		return 0, nil
	}
	p.now = p.sink.cfg.Now()
	p.expireIter(p.now)
	ents, floor := p.sink.cfg.Writer.Live().ReadEntries(p.next, p.ents[:0], room)
	p.ents = ents[:0]
	if p.next < floor {
		return p.fillFromStore(room, floor)
	}
	// At or past the floor the store iterator has nothing left to read
	// (it stops below the floor of its opening): close it now, not when
	// the sink next falls behind the live log, which may be never.
	p.closeIter()
	for i, e := range ents {
		body, err := subscribe.LiveJSON(e)
		if err := p.publish(e.Event, body, err); err != nil {
			clear(ents[i:])
			return i, err
		}
	}
	clear(ents)
	return len(ents), nil
}

// fillFromStore publishes up to room events of [p.next, floor) from the
// store. Replay never reads at or past the floor: those rows may not be
// synced yet. One iterator serves many turns: it is opened at p.next and
// read up to the floor of its opening, or iterSpan events, whichever is
// first, then opened again; expireIter closes it sooner once it is
// iterMaxAge old.
func (p *publisher) fillFromStore(room int, floor uint64) (int, error) {
	if p.it == nil {
		it, err := p.sink.cfg.Store.Events(p.next)
		if err != nil {
			return 0, &fatalError{fmt.Errorf("natssink: read the archive at %d: %w", p.next, err)}
		}
		p.it, p.itEnd, p.itOpened = it, min(floor, p.next+iterSpan), p.now
	}
	n := 0
	for n < room {
		if !p.it.Next() {
			if err := p.it.Err(); err != nil {
				p.closeIter()
				return n, &fatalError{fmt.Errorf("natssink: read the archive at %d: %w", p.next, err)}
			}
			p.next = max(p.next, p.itEnd) // nothing else below its end (compacted away)
			p.closeIter()
			return max(n, 1), nil // go round again without waiting
		}
		ev := p.it.Event()
		if ev.Seq >= p.itEnd {
			p.next = max(p.next, p.itEnd) // likewise
			p.closeIter()
			return max(n, 1), nil
		}
		body, rerr := p.rend.AppendJSON(p.body[:0], ev)
		p.body = body[:0] // the publish copies it into the connection's buffer
		if err := p.publish(ev, body, rerr); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// expireIter closes the store iterator once it is iterMaxAge old, before
// a turn and before a wait for acknowledgements: the next read of the
// store opens a new one at p.next, the next event to publish, so the
// reopen skips and repeats nothing.
func (p *publisher) expireIter(now time.Time) {
	if p.it != nil && now.Sub(p.itOpened) >= iterMaxAge {
		p.closeIter()
	}
}

func (p *publisher) closeIter() {
	if p.it != nil {
		p.it.Close()
		p.it = nil
	}
}

// publish sends one event, or skips it (counted, by why, as the
// websocket server counts it) when it cannot be rendered. Every publish
// carries the stream sequence it must follow, and asks for its reply on
// the session's inbox, token its publish number.
func (p *publisher) publish(ev *archive.Event, body []byte, renderErr error) error {
	if renderErr != nil {
		p.sink.cfg.Metrics.renderFailed(renderErr)
		p.sink.fail(errRender, fmt.Errorf("seq %d: %w", ev.Seq, renderErr))
		p.next = ev.Seq + 1
		return nil
	}
	p.hID[0] = strconv.FormatUint(ev.Seq, 10)
	p.hDID[0] = ev.DID
	p.hExpect[0] = strconv.FormatUint(p.expect, 10)
	if p.sent > 0 {
		// From the session's second publish on, the stream's last
		// message must also be the session's last: a foreign message
		// then breaks the chain for every later publish, not only the
		// one right after it. (Not on the first: the server's last id
		// may be a removed message's, or none after a purge.)
		p.hLast[0] = strconv.FormatUint(p.last, 10)
		if p.sent == 1 {
			p.msg.Header[nats.ExpectedLastMsgIdHdr] = p.hLast
		}
	}
	p.msg.Subject = Subject(p.sink.cfg.Stream, ev)
	p.msg.Data = body
	p.reply = strconv.AppendUint(p.reply[:p.inboxLen], p.sent, 10)
	p.msg.Reply = string(p.reply)
	err := p.nc.PublishMsg(&p.msg)
	p.msg.Data = nil
	if errors.Is(err, nats.ErrMaxPayload) {
		return &tooLargeError{seq: ev.Seq, bytes: len(body), maxPayload: p.nc.MaxPayload()}
	}
	if err != nil {
		return fmt.Errorf("publish of seq %d: %w", ev.Seq, err)
	}
	*p.slot(p.sent) = inflight{seq: ev.Seq, sent: p.now, bytes: len(body)}
	p.sent++
	p.expect++
	p.last = ev.Seq
	p.next = ev.Seq + 1
	return nil
}

// Subject is the subject of ev in a stream with the given prefix:
// <prefix>.commit.<collection> for record operations, <prefix>.<kind>
// otherwise. A collection that is not a valid subject suffix goes to
// <prefix>.commit.
func Subject(prefix string, ev *archive.Event) string {
	if !ev.Kind.IsCommit() {
		return prefix + "." + ev.Kind.String()
	}
	if !subjectTokens(ev.Collection) {
		return prefix + ".commit"
	}
	return prefix + ".commit." + ev.Collection
}

// subjectTokens reports whether s is dot-separated non-empty tokens free of
// wildcards and whitespace.
func subjectTokens(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '*' || c == '>' || c <= ' ' || c == 0x7f:
			return false
		case c == '.' && s[i-1] == '.':
			return false
		}
	}
	return true
}
