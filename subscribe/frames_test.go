package subscribe

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/backstream/backstream/archive"
)

// TestLiveLogBoundCountsSharedFrames: the live log's byte bound holds the
// shared frames kept in its memo slots too (the JSON, the zstd frame, the
// deflated message), not only the events: under plain, zstd and deflate
// subscribers following the tip, what the log holds never exceeds its
// bound.
func TestLiveLogBoundCountsSharedFrames(t *testing.T) {
	const bound = 64 << 10
	h := newHarness(t, harnessOpts{liveBytes: bound})
	var wire1, wire2 atomic.Int64
	d1, _ := h.dialDeflate("", nil, &wire1)
	defer d1.Close()
	d2, _ := h.dialDeflate("", nil, &wire2)
	defer d2.Close()
	z := h.dial("?compress=true", nil)
	defer z.Close()
	p := h.dial("", nil)
	defer p.Close()
	const batches, per = 30, 25
	var peak, peakEntries int64
	for b := range batches {
		h.commit(genEvents(t, b*per, per, 5)...)
		readJSONStream(t, d1, per)
		readJSONStream(t, d2, per)
		readBinary(t, z, per)
		readJSONStream(t, p, per)
		ents, _ := h.w.Live().ReadEntries(0, nil, 1<<30)
		var evBytes, frBytes int64
		for _, e := range ents {
			evBytes += archive.EventBytes(e.Event)
			if m := e.Memo(); m != nil {
				frBytes += frameBytes(m.(*frame))
			}
		}
		held := evBytes + frBytes
		if held > bound && len(ents) > 1 {
			t.Fatalf("after %d events the live log holds %d bytes (%d entries: events %d + shared frames %d), over its bound %d",
				(b+1)*per, held, len(ents), evBytes, frBytes, bound)
		} else if held > peak {
			peak, peakEntries = held, int64(len(ents))
		}
		if b == batches-1 {
			t.Logf("held %d of %d bytes at the end: %d entries, %d B of event and %d B of shared frames each",
				held, bound, len(ents), evBytes/int64(len(ents)), frBytes/int64(len(ents)))
		}
	}
	t.Logf("peak held %d of %d bytes (%d entries)", peak, bound, peakEntries)
}

// frameBytes is the memory one shared frame holds.
func frameBytes(f *frame) int64 {
	return int64(unsafe.Sizeof(*f)) + int64(cap(f.json)+cap(f.z.b)+cap(f.d.b)+cap(f.f.b))
}
