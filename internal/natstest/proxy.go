package natstest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Action is what a Proxy does with one message.
type Action int

const (
	Forward Action = iota // pass it on
	Drop                  // lose it, as a connection that fails would
	Twice                 // pass it on twice
)

// Proxy relays the NATS protocol between clients and one server on
// loopback, and asks, for every message a client publishes (PUB, HPUB)
// and every message the server delivers (MSG, HMSG), what to do with it:
// the faults of a path that loses or repeats what it carries. Clients
// must not follow the server's advertised cluster URLs
// (nats.IgnoreDiscoveredServers), or they bypass it.
type Proxy struct {
	URL string
	ln  net.Listener
	wg  sync.WaitGroup
	mu  sync.Mutex
	cs  []net.Conn
}

// Decide chooses the action for a message on subject; it is called from
// the proxy's goroutines, one per direction and connection.
type Decide func(subject string) Action

// StartProxy relays 127.0.0.1:<free port> to the server at addr (host:port);
// toServer decides the publishes, toClient the deliveries (nil: forward).
// t.Cleanup closes it.
func StartProxy(t testing.TB, addr string, toServer, toClient Decide) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "nats://" + ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.relay(c, s, toServer)
			go p.relay(s, c, toClient)
		}
	}()
	t.Cleanup(p.Close)
	return p
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.cs {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// relay copies frames from src to dst until either fails; a message frame
// (its control line and payload) is forwarded, dropped or doubled as
// decide says.
func (p *Proxy) relay(src, dst net.Conn, decide Decide) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	r, w := bufio.NewReaderSize(src, 64<<10), bufio.NewWriterSize(dst, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		line = append([]byte(nil), line...)
		subject, size := frame(line)
		var payload []byte
		if size >= 0 {
			payload = make([]byte, size+2) // and its CRLF
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
		}
		times := 1
		if size >= 0 && decide != nil {
			switch decide(subject) {
			case Drop:
				times = 0
			case Twice:
				times = 2
			}
		}
		for range times {
			w.Write(line)
			w.Write(payload)
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// frame reads a control line: for PUB, HPUB, MSG and HMSG the subject and
// the payload's size (headers included), else size -1.
func frame(line []byte) (subject string, size int) {
	f := bytes.Fields(line)
	if len(f) < 3 {
		return "", -1
	}
	switch string(bytes.ToUpper(f[0])) {
	case "PUB", "HPUB", "MSG", "HMSG":
	default:
		return "", -1
	}
	n, err := strconv.Atoi(string(f[len(f)-1]))
	if err != nil {
		return "", -1
	}
	return string(f[1]), n
}
