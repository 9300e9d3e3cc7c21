package loglimit

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Every rate-limits a log line per key: at most one line per interval.
type Every struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]keyState
}

// keyState is one key's last line and the occurrences counted since it.
type keyState struct {
	last time.Time
	n    int
}

// New is a rate limit of one line per key per interval on the clock now
// (nil: time.Now).
func New(interval time.Duration, now func() time.Time) *Every {
	if now == nil {
		now = time.Now
	}
	return &Every{interval: interval, now: now, keys: map[string]keyState{}}
}

// Tick counts one occurrence of key. ok is true when a line is due: the
// key's first occurrence, or interval has passed since its last line. n is
// then the number of occurrences the line stands for, this one included
// (n-1 were suppressed); it is 0 when ok is false.
func (e *Every) Tick(key string) (n int, ok bool) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, seen := e.keys[key]
	s.n++
	if seen && now.Sub(s.last) < e.interval {
		e.keys[key] = s
		return 0, false
	}
	e.keys[key] = keyState{last: now}
	return s.n, true
}

// Log counts one occurrence of key and, when a line is due (Tick), writes
// msg at level through l with args and the occurrences the line stands
// for ("occurrences", n, "per", the interval). It reports whether it
// wrote. Every bounded line says the same two things the same way.
func (e *Every) Log(l *slog.Logger, level slog.Level, key, msg string, args ...any) bool {
	n, ok := e.Tick(key)
	if ok {
		l.Log(context.Background(), level, msg, append(args, "occurrences", n, "per", e.interval)...)
	}
	return ok
}

// Clip is at most n bytes of s, cut on a rune boundary, followed by a
// marker saying how many bytes were dropped; s itself when it fits.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (" + strconv.Itoa(len(s)-cut) + " bytes truncated)"
}
