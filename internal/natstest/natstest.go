// Package natstest runs a real NATS JetStream cluster in process, on
// loopback, for tests: the server is github.com/nats-io/nats-server/v2,
// the same code `nats-server` runs. Nodes can be stopped and restarted on
// their ports and stores. Only tests import it.
package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// Stop shuts node i down (its store stays).
func (c *Cluster) Stop(i int) {
	if s := c.nodes[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.nodes[i] = nil
	}
}

// Restart starts node i again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	o := c.opts[i].Clone()
	s, err := server.NewServer(o)
	if err != nil {
		c.t.Fatalf("natstest: node %d: %v", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		c.t.Fatalf("natstest: node %d not ready", i)
	}
	c.nodes[i] = s
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// WaitJetStream waits until JetStream has a meta leader (a cluster can
// take a few seconds to elect one).
func (c *Cluster) WaitJetStream() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.nodes {
			if s != nil && (len(c.nodes) == 1 || s.JetStreamIsLeader()) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("natstest: no JetStream meta leader within 30 s")
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
