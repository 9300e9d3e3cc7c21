package main

// client.go owns the benchmark's /subscribe clients: one replaying reader
// that stops at a cursor, and a group of live readers that only count.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// wsURL turns serve's http base URL into its /subscribe URL with query q.
func wsURL(base, q string) string {
	u := "ws" + strings.TrimPrefix(base, "http") + "/subscribe"
	if q != "" {
		u += "?" + q
	}
	return u
}

// eventCursor is the "cursor" field of one Jetstream JSON event (every
// event backstream sends carries its archive seq there).
func eventCursor(msg []byte) (uint64, error) {
	i := bytes.LastIndex(msg, []byte(`"cursor":`))
	if i < 0 {
		return 0, fmt.Errorf("event without cursor: %.200s", msg)
	}
	rest := msg[i+len(`"cursor":`):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	return strconv.ParseUint(string(rest[:j]), 10, 64)
}

// readUntil connects to base's /subscribe from cursor and reads until an
// event with seq ≥ tip arrives. It returns the events read and checks that
// their cursors strictly increase.
func readUntil(ctx context.Context, base string, cursor, tip uint64) (int64, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 1 << 16}
	conn, _, err := d.DialContext(ctx, wsURL(base, "includeSync=true&cursor="+strconv.FormatUint(cursor, 10)), nil)
	if err != nil {
		return 0, fmt.Errorf("replay: dial: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var n int64
	var last uint64
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			return n, fmt.Errorf("replay: after %d events (cursor %d): %w", n, last, err)
		}
		seq, err := eventCursor(msg)
		if err != nil {
			return n, err
		}
		if seq <= last && n > 0 {
			return n, fmt.Errorf("replay: cursor %d after %d", seq, last)
		}
		last = seq
		n++
		if seq >= tip {
			return n, nil
		}
	}
}

// fanout is a group of live subscribers that count the events they read.
type fanout struct {
	events atomic.Int64
	wg     sync.WaitGroup
	conns  []*websocket.Conn
	mu     sync.Mutex
	errs   []error // read errors other than our own close
	closed atomic.Bool
}

// startFanout connects n subscribers to base's /subscribe (live, no filter)
// and starts one reader goroutine per connection. close stops them.
func startFanout(ctx context.Context, base string, n int) (*fanout, error) {
	f := &fanout{}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 1 << 16}
	for i := 0; i < n; i++ {
		conn, _, err := d.DialContext(ctx, wsURL(base, ""), nil)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("fanout: dial subscriber %d: %w", i, err)
		}
		f.conns = append(f.conns, conn)
		f.wg.Add(1)
		go func() { // owned: close closes conn, which ends the loop
			defer f.wg.Done()
			for {
				// The body is not needed: the next NextReader discards it.
				if _, _, err := conn.NextReader(); err != nil {
					if !f.closed.Load() {
						f.mu.Lock()
						f.errs = append(f.errs, err)
						f.mu.Unlock()
					}
					return
				}
				f.events.Add(1)
			}
		}()
	}
	return f, nil
}

// err reports the subscribers that were disconnected by the server.
func (f *fanout) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		return nil
	}
	return fmt.Errorf("fanout: %d subscribers disconnected, first: %w", len(f.errs), errors.Join(f.errs[0]))
}

// disconnected is how many subscribers the server disconnected.
func (f *fanout) disconnected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errs)
}

// close ends every subscriber and waits for the readers.
func (f *fanout) close() {
	f.closed.Store(true)
	for _, c := range f.conns {
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
			time.Now().Add(time.Second))
		_ = c.Close()
	}
	f.wg.Wait()
}
