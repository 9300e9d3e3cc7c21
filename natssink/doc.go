// Package natssink owns the NATS JetStream sink: a reader of the archive
// that publishes every archived event, in seq order and once, into one
// JetStream stream, so consumers on many machines read a replicated,
// replayable, filterable log instead of connecting to /subscribe.
//
// The body of each message is exactly the event's /subscribe JSON (with its
// cursor): for events still in the live log it is the rendering kept in the
// entry's memo slot and shared with every subscriber (subscribe.LiveJSON);
// older events are rendered here with the same renderer. The subject is
// <stream>.commit.<collection NSID> for create, update and delete, and
// <stream>.<kind> for identity, account and sync. Headers: Nats-Msg-Id is
// the archive seq in decimal, Backstream-Did the account's DID,
// Nats-Expected-Last-Sequence the stream sequence the publish must follow;
// from a session's second publish on, Nats-Expected-Last-Msg-Id is the
// archive seq published before it, so a foreign message in the stream
// gets every later publish of the session refused.
//
// # Invariants kept here
//
//   - The sink only reads the archive. It never submits anything to the
//     writer but its position (cursor/sink/nats, a unit Put at most once per
//     PositionEvery) and the removals it sees empty the stream
//     (cursor/sink/nats_removed, below), so NATS down, slow or full never
//     slows ingest: the archive is the buffer and the sink lags.
//   - Exactly once into the stream. Every publish carries the stream
//     sequence it must follow (Nats-Expected-Last-Sequence): a publish after
//     one that was lost is refused by the server instead of leaving a gap,
//     and one repeated is refused instead of landing twice. On any error the
//     sink drops what is in flight, reads the stream's last message (from
//     the stream's leader, never by a direct get, which a lagging replica
//     or mirror may answer), and resumes from the archive seq after its
//     Nats-Msg-Id — the stream, not
//     the position, is the truth, so a SIGKILL between a publish and the
//     position write loses and repeats nothing. Nats-Msg-Id adds the
//     server's de-duplication within the duplicate window, a second guard
//     only: kept short (DefaultDuplicateWindow), since the server holds
//     every id of the window in memory (about 170 bytes each).
//   - A reply covers the publishes before it in the window: a publish
//     stored at stream sequence N after the stream's last was N-1 means
//     those before it, chained the same way, are stored below it. So a lost
//     reply costs nothing; a refusal, for any publish, ends the session.
//   - At most Window publishes are unacknowledged at once, and a write
//     the path does not take (a partition, a frozen server) blocks a
//     publish at most AckTimeout (the connection's flusher timeout).
//   - An event larger than the servers' max_payload, or than the stream's
//     max_msg_size, is never skipped: the sink publishes up to it, lets
//     the window before it be acknowledged, and stops there in state
//     too_large (Status.TooLarge names its seq, size and the limit;
//     backstream_nats_too_large_seq; one ERROR line per event, not per
//     recheck). It rechecks on TooLargeBackoff, reconnecting first for
//     max_payload (a client learns it only from the server's greeting),
//     and goes on from that event once the operator has raised the limit.
//   - An empty stream starts from Config.From (archive seq, 0 = the
//     beginning); a stream holding messages always wins over From. A
//     purge keeps the stream's last sequence and last message id, so a
//     session watches the stream's first sequence (purge.go): once it
//     moves past a message the session stored, with more than one message
//     gone since the watch last looked, the session ends, and the sink
//     publishes nothing more until it finds the stream empty (then from
//     From): what it had published behind the purge cannot be put back in
//     order. One message gone is the operator removing it (nats stream
//     rmm; the stream's only message leaves the very state a purge does,
//     in every field of the stream info, and the servers keep its id as
//     the last message id and in the duplicate window: only what the sink
//     saw tells them apart): the sink publishes on behind it, and keeps
//     the removal in the store (cursor/sink/nats_removed: the stream's
//     creation time, its last sequence, the removed message's archive
//     seq), so a later session, or backstream started again, that finds
//     the same stream still empty there resumes after the removed
//     message. A trim of the front (a partial purge, --keep or --seq, or
//     removals) is no purge to the watch while what it leaves holds a
//     message the stream held at its last look; one that leaves none is
//     exactly what a purge leaves once the sink has published
//     behind it (the same stream info and messages), and is taken for a
//     purge: its last error names both ways out (purge again to refill,
//     restart backstream to keep the trim). A stream whose own rules
//     remove messages (max_age, discard old, a retention other than
//     limits) is not watched, from the moment it has such a rule; one
//     those rules emptied (emptiedItself) is resumed after the position,
//     which the sink writes as it stops.
//   - The stream is created when missing (file storage, Replicas, a
//     duplicate window of DefaultDuplicateWindow); an existing stream is never
//     changed: its differences from that config are logged once per
//     session and shown in Status.
//
// The sink runs in steady state only (node adds it to the lifecycle's
// steady components). Persistence failures of our own (a store read, the
// writer refusing the position) stop it with an error; NATS failures never
// do: they are counted, shown, and retried with backoff. A connection
// nats.go closes for good (the same authorization error twice) is dialled
// again; the servers' asynchronous errors (a permissions violation) are
// logged once and named in the last error. A stream without a leader (an
// election, or fewer than a quorum of its replicas up) fails every step of
// a session in its own words; after such a failure the sink asks the
// stream's info, and when it has no leader, or names a leader without a
// quorum of the stream's replicas up (their servers offline: such a leader
// answers for the stream until it notices, but stores nothing), or takes
// the subject though no server took a publish, the failure is a
// noLeaderError: state no_leader and a last error saying so, at every
// retry; an info unanswered keeps no_leader once it is shown (nothing says
// the stream has a leader again).
package natssink
