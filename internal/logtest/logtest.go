// Package logtest holds a slog handler that counts log lines, shared by the
// packages' tests that prove a log line's volume is bounded (nothing in
// production imports it).
package logtest

import (
	"context"
	"log/slog"
	"maps"
	"sync"
)

// Counter is a slog.Handler counting the records at or above Info, by
// message. Safe for concurrent use.
type Counter struct {
	mu  sync.Mutex
	n   int
	msg map[string]int
}

// Logger is a logger writing into c.
func (c *Counter) Logger() *slog.Logger { return slog.New(c) }

// Enabled admits every level: Debug records reach Handle, which ignores
// them, so a demoted line is proven uncounted rather than filtered.
func (c *Counter) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts r when it is at Info or above.
func (c *Counter) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msg == nil {
		c.msg = map[string]int{}
	}
	c.n++
	c.msg[r.Message]++
	return nil
}

// WithAttrs is c: attributes are not counted.
func (c *Counter) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup is c.
func (c *Counter) WithGroup(string) slog.Handler { return c }

// Lines is the number of records at or above Info.
func (c *Counter) Lines() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Of is the number of records at or above Info with message msg.
func (c *Counter) Of(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msg[msg]
}

// Messages is the number of records at or above Info by message.
func (c *Counter) Messages() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.msg)
}
