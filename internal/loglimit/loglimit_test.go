package loglimit

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// TestEvery drives one Every on a fake clock through a script of ticks:
// the first occurrence of a key logs, occurrences within the interval do
// not, the first one at or after it logs standing for every occurrence
// since the last line, and keys are independent.
func TestEvery(t *testing.T) {
	type tick struct {
		at     time.Duration // since the start
		key    string
		wantN  int
		wantOK bool
	}
	const every = time.Minute
	tests := []struct {
		name  string
		ticks []tick
	}{
		{"first occurrence logs", []tick{
			{0, "a", 1, true},
		}},
		{"within the interval none", []tick{
			{0, "a", 1, true},
			{time.Second, "a", 0, false},
			{every - time.Nanosecond, "a", 0, false},
		}},
		{"at the interval one line for all since", []tick{
			{0, "a", 1, true},
			{time.Second, "a", 0, false},
			{2 * time.Second, "a", 0, false},
			{every, "a", 3, true},
			{every + time.Second, "a", 0, false},
			{3 * every, "a", 2, true},
		}},
		{"a lone occurrence after a quiet interval", []tick{
			{0, "a", 1, true},
			{10 * every, "a", 1, true},
		}},
		{"keys independent", []tick{
			{0, "a", 1, true},
			{time.Second, "b", 1, true},
			{2 * time.Second, "a", 0, false},
			{3 * time.Second, "b", 0, false},
			{every, "a", 2, true},
			{every + time.Second, "b", 2, true},
			{every + 2*time.Second, "c", 1, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var now time.Time
			e := New(every, func() time.Time { return now })
			for i, tk := range tt.ticks {
				now = start.Add(tk.at)
				if n, ok := e.Tick(tk.key); n != tk.wantN || ok != tk.wantOK {
					t.Fatalf("tick %d (%s at +%v): (%d, %v), want (%d, %v)", i, tk.key, tk.at, n, ok, tk.wantN, tk.wantOK)
				}
			}
		})
	}
}

// TestEveryZeroTime: a clock at the zero time (a test's fake) still logs
// a key's first occurrence; the zero time is not "never logged".
func TestEveryZeroTime(t *testing.T) {
	e := New(time.Minute, func() time.Time { return time.Time{} })
	if n, ok := e.Tick("a"); n != 1 || !ok {
		t.Fatalf("first tick at the zero time: (%d, %v), want (1, true)", n, ok)
	}
	if _, ok := e.Tick("a"); ok {
		t.Fatal("a second line at the same instant")
	}
}

// TestEveryConcurrent: ticks from many goroutines are all counted: the
// lines of one key stand for every occurrence (run with -race).
func TestEveryConcurrent(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := New(time.Minute, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	var total, lines int
	var tmu sync.Mutex
	for range goroutines {
		wg.Go(func() {
			for range each {
				if n, ok := e.Tick("k"); ok {
					tmu.Lock()
					total += n
					lines++
					tmu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	n, ok := e.Tick("k")
	if !ok || lines != 1 || total+n != goroutines*each+1 {
		t.Fatalf("%d lines standing for %d, then (%d, %v); want 1 line, then one standing for the rest of %d", lines, total, n, ok, goroutines*each+1)
	}
}

// TestNewNilClock: a nil clock is time.Now.
func TestNewNilClock(t *testing.T) {
	e := New(time.Hour, nil)
	if n, ok := e.Tick("a"); n != 1 || !ok {
		t.Fatalf("first tick: (%d, %v)", n, ok)
	}
	if _, ok := e.Tick("a"); ok {
		t.Fatal("a second line within the hour")
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"under the limit", "hello", 10, "hello"},
		{"at the limit", "hello", 5, "hello"},
		{"empty", "", 0, ""},
		{"ASCII", "hello, world", 5, "hello… (7 bytes truncated)"},
		// "é" is 2 bytes (c3 a9): a cut after its first byte backs off to
		// before it.
		{"2-byte rune at the cut", "abé!", 3, "ab… (3 bytes truncated)"},
		{"2-byte rune ends at the cut", "abé!", 4, "abé… (1 bytes truncated)"},
		// "世" is 3 bytes: cuts inside it at either continuation byte.
		{"3-byte rune, cut after its first byte", "a世b", 2, "a… (4 bytes truncated)"},
		{"3-byte rune, cut after its second byte", "a世b", 3, "a… (4 bytes truncated)"},
		{"4-byte rune at the start", "😀x", 2, "… (5 bytes truncated)"},
		{"zero bound", "abc", 0, "… (3 bytes truncated)"},
		{"negative bound", "abc", -1, "… (3 bytes truncated)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clip(tt.s, tt.n)
			if got != tt.want {
				t.Fatalf("Clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("Clip(%q, %d) = %q: not valid UTF-8", tt.s, tt.n, got)
			}
			if kept, _, _ := strings.Cut(got, "… ("); len(tt.s) > tt.n && len(kept) > max(tt.n, 0) {
				t.Fatalf("Clip(%q, %d) kept %d bytes", tt.s, tt.n, len(kept))
			}
		})
	}
}

// TestEveryLog: Log writes the due lines only, each with the occurrences
// it stands for and the interval.
func TestEveryLog(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	e := New(time.Minute, func() time.Time { return now })
	var buf strings.Builder
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	var wrote []bool
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second, time.Minute} {
		now = start.Add(at)
		wrote = append(wrote, e.Log(l, slog.LevelWarn, "k", "a line", "host", "h"))
	}
	want := "level=WARN msg=\"a line\" host=h occurrences=1 per=1m0s\n" +
		"level=WARN msg=\"a line\" host=h occurrences=3 per=1m0s\n"
	if buf.String() != want || !slices.Equal(wrote, []bool{true, false, false, true}) {
		t.Fatalf("wrote %v:\n%s\nwant [true false false true]:\n%s", wrote, buf.String(), want)
	}
}
