package merge

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/backstream/backstream/upstream"
)

// longCursorSource lists empty pages, each with a new cursor of the
// 64 KiB a page may carry, then (its pages-th) a last page without one. It notes the
// live heap after its second call and at its last.
type longCursorSource struct {
	upstream.RepoSource
	pages, calls int
	base, grown  int64
}

func (s *longCursorSource) ListRepos(context.Context, string, int) (upstream.Page, error) {
	s.calls++
	switch s.calls {
	case 2:
		s.base = liveHeap()
	case s.pages:
		s.grown = liveHeap() - s.base
		return upstream.Page{}, nil
	}
	return upstream.Page{Cursor: fmt.Sprintf("%08d", s.calls) + strings.Repeat("c", 64<<10-8)}, nil
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestDiscoveryCursorMemory (M6): the loop check of a discovery listing
// holds a fixed few bytes a cursor, as bootstrap's does, not the cursors
// themselves: 300 pages of 64 KiB cursors must not keep 19 MiB alive.
func TestDiscoveryCursorMemory(t *testing.T) {
	r := newRig(t)
	store, w := r.store, r.w
	src := &longCursorSource{pages: 300}
	if err := Discover(t.Context(), Config{Store: store, Writer: w, Source: src, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if src.calls != src.pages {
		t.Fatalf("%d pages listed, want %d", src.calls, src.pages)
	}
	if src.grown > 4<<20 {
		t.Fatalf("the live heap grew %d KiB over %d pages of 64 KiB cursors: the listing holds its cursors", src.grown>>10, src.pages)
	}
	t.Logf("live heap grew %d KiB", src.grown>>10)
}
