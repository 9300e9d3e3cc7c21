package bootstrap

// watermark.go owns the completion watermark (R5, R6): listRepos
// pages numbered in order, each with the number of its repos that are not
// yet durably terminal. The checkpoint may cover page p only when every
// page ≤ p has a count of zero. It is a pure data structure: no I/O, no
// goroutines; the coordinator feeds it and submits what it returns.

import "github.com/backstream/backstream/archive"

// page is one listRepos page as enumeration saw it.
type page struct {
	idx       int64
	host      string // the lane: "" for the relay's listing, else the host's
	reqCursor string // the cursor the page was requested with ("" = first page)
	next      string // the cursor after it ("" when final)
	final     bool   // the listing ends with this page
	cut       bool   // ... early: the relay may list more after it
	entries   int    // entries listed (every entry counts, terminal or not)
	remaining int    // dispatched repos not yet durably terminal
	weight    int64  // enumeration-window credit held by the page
}

// checkpoint is the durable form of the watermark.
type checkpoint struct {
	host   string // "" for the relay's listing (cursor/listrepos), else cursor/hostlist/<host>
	cursor archive.ListCursor
	last   string // the last non-empty cursor covered ("" = none yet)
}

// watermark tracks pages from the last checkpoint on.
type watermark struct {
	pages   []*page // in listing order; pages[0] is the oldest not yet covered
	pending checkpoint
	dirty   bool  // pending moved since it was last taken
	covered int64 // entries of the pages popped so far
}

// add registers a page. Its repos must already be counted in remaining.
func (w *watermark) add(p *page) { w.pages = append(w.pages, p) }

// done records that one repo of p is durably terminal.
func (w *watermark) done(p *page) {
	if p.remaining <= 0 {
		panic("bootstrap: watermark: page count below zero")
	}
	p.remaining--
}

// advance pops every leading page whose count is zero, moving the pending
// checkpoint over it, and returns the popped pages (their window credit is
// the caller's to release).
func (w *watermark) advance() []*page {
	var out []*page
	for len(w.pages) > 0 && w.pages[0].remaining == 0 {
		p := w.pages[0]
		w.pages[0] = nil
		w.pages = w.pages[1:]
		w.covered += int64(p.entries)
		out = append(out, p)
		if p.cut {
			// The listing was cut short at this page: the checkpoint stays
			// at the cursor it was requested with (already pending, or
			// none for a first page), never "finished", so a restart asks
			// for it again and skips nothing the relay lists after it;
			// discovery resumes there too (cursor/listrepos_last).
			continue
		}
		if p.final {
			w.pending.cursor = archive.ListCursor{Finished: true}
		} else {
			w.pending.cursor = archive.ListCursor{Cursor: p.next}
		}
		switch {
		case p.next != "" && !p.final:
			w.pending.last = p.next
		case p.reqCursor != "":
			w.pending.last = p.reqCursor
		}
		w.dirty = true
	}
	return out
}

// take returns the pending checkpoint if it moved since the last take.
func (w *watermark) take() (checkpoint, bool) {
	if !w.dirty {
		return checkpoint{}, false
	}
	w.dirty = false
	return w.pending, true
}

// outstanding is the number of pages not yet covered.
func (w *watermark) outstanding() int { return len(w.pages) }

// checkpointPuts encodes a checkpoint as the unit puts that make it durable.
func checkpointPuts(c checkpoint) ([]archive.KV, error) {
	v, err := archive.EncodeListCursor(c.cursor)
	if err != nil {
		return nil, err
	}
	key, lastKey := archive.KeyCursorListRepos, archive.KeyCursorListLast
	if c.host != "" {
		key, lastKey = archive.HostListCursorKey(c.host), archive.HostListLastKey(c.host)
	}
	puts := []archive.KV{{Key: key, Value: v}}
	if c.last != "" {
		lv, err := archive.EncodeListCursor(archive.ListCursor{Cursor: c.last})
		if err != nil {
			return nil, err
		}
		puts = append(puts, archive.KV{Key: lastKey, Value: lv})
	}
	return puts, nil
}
