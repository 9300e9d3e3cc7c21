// Package natstest runs a real NATS JetStream cluster in process, on
// loopback, for tests: the server is github.com/nats-io/nats-server/v2,
// the same code `nats-server` runs. Nodes can be stopped and restarted on
// their ports and stores. Only tests import it.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/subscribe"

	"github.com/backstream/backstream/internal/freeport"
)

// Cluster is n JetStream servers routed to each other on 127.0.0.1.
type Cluster struct {
	t     testing.TB
	opts  []*server.Options
	nodes []*server.Server
}

// Start starts an n-node cluster (n = 1: a single server, no routes) with
// its stores under t.TempDir(); t.Cleanup stops it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: make([]*server.Options, n), nodes: make([]*server.Server, n)}
	clientPorts, routePorts := freePorts(t, n), freePorts(t, n)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   fmt.Sprintf("%s/n%d", dir, i),
			NoLog:      true,
			NoSigs:     true,
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "bs", Host: "127.0.0.1", Port: routePorts[i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts[i] = o
	}
	for i := range n {
		c.Restart(i)
	}
	t.Cleanup(c.Shutdown)
	c.WaitJetStream()
	return c
}

// URLs are the client URLs, comma-separated.
func (c *Cluster) URLs() string {
	var u []string
	for _, o := range c.opts {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(u, ",")
}

// Addr is node i's client address, host:port.
func (c *Cluster) Addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.opts[i].Port) }

// Stop shuts node i down (its store stays).
func (c *Cluster) Stop(i int) {
	if s := c.nodes[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.nodes[i] = nil
	}
}

// readyTimeout bounds a node's start (a wait, not an assertion on speed).
const readyTimeout = time.Minute

// Restart starts node i again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	o := c.opts[i].Clone()
	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatalf("natstest: node %d: %v", i, err)
	}
	go s.Start()
	// A node's start recovers its JetStream store before it listens: on a
	// loaded 2-core machine that once took more than 20 s.
	if !s.ReadyForConnections(readyTimeout) {
		c.t.Fatalf("natstest: node %d not ready for connections within %v", i, readyTimeout)
	}
	c.nodes[i] = s
}

// SetMaxPayload sets every node's max_payload (bytes) and reloads it, as an
// operator editing the config and sending SIGHUP would: clients already
// connected learn the new limit only when they reconnect.
func (c *Cluster) SetMaxPayload(n int32) {
	c.t.Helper()
	c.reload(fmt.Sprintf("max_payload %d", n), func(o *server.Options) { o.MaxPayload = n })
}

// SetUsers sets every node's users (nil: no authentication) and reloads
// it, as an operator editing the config and sending SIGHUP would: a
// client the new users refuse is disconnected.
func (c *Cluster) SetUsers(users []*server.User) {
	c.t.Helper()
	c.reload("users", func(o *server.Options) { o.Users = users })
}

// reload applies set to every node's options and reloads the running ones.
func (c *Cluster) reload(what string, set func(*server.Options)) {
	c.t.Helper()
	for i, s := range c.nodes {
		set(c.opts[i])
		if s == nil {
			continue
		}
		if err := s.ReloadOptions(c.opts[i].Clone()); err != nil {
			c.t.Fatalf("natstest: node %d: reload %s: %v", i, what, err)
		}
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// WaitJetStream waits until JetStream has a meta leader that counts every
// node as a peer a stream can be placed on (online, with JetStream, its
// stats received): a leader alone is not enough, as an R3 stream created
// before the leader has heard from the other two fails with "no suitable
// peers for placement". Every node must be running. A cluster can take a
// few seconds for both.
func (c *Cluster) WaitJetStream() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	peers := 0
	for time.Now().Before(deadline) {
		for _, s := range c.nodes {
			if s == nil {
				continue
			}
			if len(c.nodes) == 1 {
				return
			}
			if s.JetStreamIsLeader() {
				if peers = len(s.JetStreamClusterPeers()); peers == len(c.nodes) {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("natstest: no JetStream meta leader counting all %d nodes as peers within 30 s (last seen: %d)", len(c.nodes), peers)
}

// freePorts is n distinct loopback ports free a moment ago, below the
// ephemeral range (freeport.Addr).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		_, ps, _ := net.SplitHostPort(a)
		p, err := strconv.Atoi(ps)
		if err != nil {
			t.Fatalf("natstest: port of %s: %v", a, err)
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

// ReadStream reads the stream from its start with an ordered consumer
// until it holds at least want messages and one more second brings none
// (so extra messages — duplicates — are read too), or 60 s pass. The
// count comes from the caller (the archive), not from the stream's own
// info: a stream leader elected a moment ago may report a state it has
// not caught up with.
func ReadStream(t testing.TB, urls, stream string, want int) []jetstream.Msg {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A cluster restarted a moment ago may not answer yet.
	var c jetstream.Consumer
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			c, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("natstest: stream %s: %v", stream, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var out []jetstream.Msg
	for ctx.Err() == nil {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrNoResponders) {
			// A node restarted a moment ago: the stream's leader is
			// being elected again. The ordered consumer resumes.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			out = append(out, m)
			n++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatal(err)
		}
		if n == 0 && len(out) >= want {
			break
		}
	}
	return out
}

// ArchiveEvents counts the archived events.
func ArchiveEvents(t testing.TB, store *archive.Store) int {
	t.Helper()
	it, err := store.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// CheckStream checks the stream holds every archived event exactly once,
// in seq order: the message id is the seq, the body the event's /subscribe
// JSON, the subject and DID header the event's.
func CheckStream(t testing.TB, store *archive.Store, msgs []jetstream.Msg, subject func(*archive.Event) string) {
	t.Helper()
	it, err := store.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	r := subscribe.Renderer{Cursor: true}
	i := 0
	for it.Next() {
		ev := it.Event()
		if i >= len(msgs) {
			t.Fatalf("the stream ends after %d messages; archive seq %d (and later) missing", i, ev.Seq)
		}
		m := msgs[i]
		id := m.Headers().Get(nats.MsgIdHdr)
		if id != strconv.FormatUint(ev.Seq, 10) {
			t.Fatalf("stream message %d has id %s, want archive seq %d (duplicate or gap)", i+1, id, ev.Seq)
		}
		want, err := r.AppendJSON(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data()) != string(want) {
			t.Fatalf("seq %d body\n%s\nwant the /subscribe JSON\n%s", ev.Seq, m.Data(), want)
		}
		if m.Subject() != subject(ev) || m.Headers().Get("Backstream-Did") != ev.DID {
			t.Fatalf("seq %d: subject %s did %s", ev.Seq, m.Subject(), m.Headers().Get("Backstream-Did"))
		}
		i++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(msgs) {
		t.Fatalf("the stream holds %d messages, the archive %d events (duplicates)", len(msgs), i)
	}
}
