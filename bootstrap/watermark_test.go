package bootstrap

import (
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestWatermark: the checkpoint covers the highest page whose repos and all
// earlier pages' repos are terminal; "finished" after the final page; the
// last non-empty cursor follows the covered pages.
func TestWatermark(t *testing.T) {
	w := &watermark{}
	p1 := &page{idx: 1, reqCursor: "", next: "c1", entries: 3, remaining: 2}
	p2 := &page{idx: 2, reqCursor: "c1", next: "c2", entries: 3, remaining: 1}
	p3 := &page{idx: 3, reqCursor: "c2", next: "", final: true, entries: 2, remaining: 0}
	w.add(p1)
	w.add(p2)
	w.add(p3)
	if popped := w.advance(); len(popped) != 0 {
		t.Fatalf("popped %d pages before any repo finished", len(popped))
	}
	if _, ok := w.take(); ok {
		t.Fatal("checkpoint moved before any page was covered")
	}
	w.done(p2) // a later page finishing first moves nothing
	if popped := w.advance(); len(popped) != 0 {
		t.Fatal("a later page was covered past an unfinished earlier one")
	}
	w.done(p1)
	if w.advance(); w.outstanding() != 3 {
		t.Fatal("page 1 still has a repo in flight: nothing may be covered")
	}
	w.done(p1)
	popped := w.advance()
	c, ok := w.take()
	if len(popped) != 3 || !ok || !c.cursor.Finished || c.last != "c2" || w.covered != 8 {
		t.Fatalf("final: popped %d, checkpoint %+v (moved %v), covered %d", len(popped), c, ok, w.covered)
	}
	if _, ok := w.take(); ok {
		t.Fatal("take twice without a move")
	}
}

func TestWatermarkPartialCoverage(t *testing.T) {
	w := &watermark{}
	p1 := &page{idx: 1, next: "c1", entries: 1, remaining: 0}
	p2 := &page{idx: 2, reqCursor: "c1", next: "c2", entries: 1, remaining: 1}
	w.add(p1)
	w.add(p2)
	w.advance()
	c, ok := w.take()
	if !ok || c.cursor != (archive.ListCursor{Cursor: "c1"}) || c.last != "c1" {
		t.Fatalf("checkpoint %+v", c)
	}
	puts, err := checkpointPuts(c)
	if err != nil || len(puts) != 2 || string(puts[0].Key) != string(archive.KeyCursorListRepos) {
		t.Fatalf("puts %v %v", puts, err)
	}
	if got, err := archive.DecodeListCursor(puts[0].Value); err != nil || got.Cursor != "c1" {
		t.Fatalf("encoded checkpoint %+v %v", got, err)
	}
	// A page that counts nothing (all entries already terminal) is covered
	// as soon as the pages before it are.
	defer func() {
		if recover() == nil {
			t.Fatal("done below zero did not panic")
		}
	}()
	w.done(p1)
}
