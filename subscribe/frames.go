package subscribe

// This file owns the per-event payloads a subscriber sends: the JSON, the
// dictionary-less zstd frame, the dictionary zstd frame and the deflated
// JSON. For live events they are made once and kept in the live log's memo
// slot, shared by every subscriber, and each is charged to the live log's
// byte bound as it is made; replayed events are rendered by the subscriber
// that reads them.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/klauspost/compress/zstd"

	"github.com/backstream/backstream/archive"
)

// frame is one live event's payloads. json is set at creation; the
// compressed forms are made on first use. Each form's bytes are charged to
// the live entry holding the frame when made.
type frame struct {
	ent  *archive.LiveEntry
	json []byte
	err  error // rendering failed: the event is skipped for everyone

	z sharedForm // dictionary-less zstd frame
	d sharedForm // zstd frame with the dictionary
	f sharedForm // the JSON as a permessage-deflate message (deflate.go)
}

// sharedForm is one form of a live frame, made by the first subscriber
// that needs it and shared by every other. Unlike a sync.Once's, a making
// that panics (a bug; that subscriber ends with 1011, counted) leaves the
// form unmade, not empty: the next subscriber makes it again, and ends the
// same way if the panic recurs. No subscriber is sent a form a panic left
// half made.
type sharedForm struct {
	done atomic.Bool
	mu   sync.Mutex
	b    []byte
}

// get returns the form, made by build the first time.
func (s *sharedForm) get(build func() []byte) []byte {
	if s.done.Load() {
		return s.b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done.Load() {
		s.b = build()
		s.done.Store(true)
	}
	return s.b
}

// codecs compresses payloads: one dictionary-less encoder and, once
// trained, one with backstream's dictionary. EncodeAll is safe for
// concurrent use.
type codecs struct {
	plain *zstd.Encoder

	mu      sync.Mutex
	dict    *zdict // nil until loaded or trained
	samples int
	src     func() *source // nil until the server is attached
}

// zdict is a trained dictionary.
type zdict struct {
	id  uint32
	raw []byte // the zstd dictionary format, as served at /zstd-dictionary
	enc *zstd.Encoder
}

func newCodecs(samples int, src func() *source) (*codecs, error) {
	enc, err := zstd.NewWriter(nil, encoderOptions()...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: zstd encoder: %w", err)
	}
	return &codecs{plain: enc, samples: samples, src: src}, nil
}

// encoderOptions: one frame per event, no checksum (the transport has its
// own), as many concurrent encodes as CPUs.
func encoderOptions(extra ...zstd.EOption) []zstd.EOption {
	return append([]zstd.EOption{
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithLowerEncoderMem(true),
	}, extra...)
}

func (c *codecs) close() {
	c.plain.Close()
	c.mu.Lock()
	if c.dict != nil {
		c.dict.enc.Close()
	}
	c.mu.Unlock()
}

// errNoDictionary: the archive is too small to train a dictionary from.
var errNoDictionary = errors.New("the archive does not hold enough events to train a dictionary yet")

// dictionary returns the current dictionary: the one the store holds
// (meta/zstd_dictionary), or, the first time, one trained from the
// archive's first c.samples events and stored before it is served. Stored,
// it and its id outlive restarts, and the compaction passes that remove
// some of the events it was trained from.
func (c *codecs) dictionary(ctx context.Context) (*zdict, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dict != nil {
		return c.dict, nil
	}
	src := c.src()
	if src == nil {
		return nil, errNoDictionary
	}
	stored, err := src.store.ZstdDictionary()
	if errors.Is(err, archive.ErrNotFound) {
		stored, err = c.train(ctx, src)
	}
	if err != nil {
		return nil, fmt.Errorf("subscribe: dictionary: %w", err)
	}
	enc, err := zstd.NewWriter(nil, encoderOptions(zstd.WithEncoderDict(stored.Raw))...)
	if err != nil {
		return nil, fmt.Errorf("subscribe: dictionary %d: %w", stored.ID, err)
	}
	c.dict = &zdict{id: stored.ID, raw: stored.Raw, enc: enc}
	return c.dict, nil
}

// train builds the dictionary from the archive's first c.samples events
// and stores it, synced, through the writer.
func (c *codecs) train(ctx context.Context, src *source) (archive.ZstdDictionary, error) {
	tip, err := src.store.Tip()
	if err != nil {
		return archive.ZstdDictionary{}, err
	}
	if tip < uint64(c.samples) {
		return archive.ZstdDictionary{}, fmt.Errorf("%w (%d of %d)", errNoDictionary, tip, c.samples)
	}
	it, err := src.store.Events(1)
	if err != nil {
		return archive.ZstdDictionary{}, err
	}
	defer it.Close()
	r := &Renderer{Cursor: true}
	var inputs [][]byte
	h := fnv.New32a()
	for len(inputs) < c.samples && it.Next() {
		b, err := r.AppendJSON(nil, it.Event())
		if err != nil {
			continue
		}
		inputs = append(inputs, b)
		h.Write(b)
	}
	if err := it.Err(); err != nil {
		return archive.ZstdDictionary{}, err
	}
	// Ids below 32768 are reserved by the zstd format.
	id := 32768 + h.Sum32()%((1<<31)-32768)
	raw, err := buildDictionary(id, inputs)
	if err != nil {
		return archive.ZstdDictionary{}, err
	}
	v, err := archive.EncodeZstdDictionary(raw)
	if err != nil {
		return archive.ZstdDictionary{}, err
	}
	rc, err := src.writer.Apply(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyZstdDictionary, Value: v}}})
	if err == nil {
		err = rc.Refused
	}
	if err != nil {
		return archive.ZstdDictionary{}, fmt.Errorf("store the dictionary: %w", err)
	}
	return archive.ZstdDictionary{ID: id, Raw: raw}, nil
}

// dictContentMax bounds the dictionary's content (its history).
const dictContentMax = 64 << 10

// buildDictionary makes a zstd dictionary from rendered events,
// deterministically (klauspost's dict.BuildZstdDict is not: it iterates
// maps), so that the same samples always make the same bytes. The
// content is evenly spaced samples laid end to end, the most recent
// closest to the end (shortest offsets); zstd.BuildDict derives the entropy
// tables from all samples. When the history holds every sample (a small or
// very repetitive archive) the samples compress to matches alone and
// zstd.BuildDict finds no literals to build its tables from: then every
// other sample is left out of the history, and so on.
func buildDictionary(id uint32, samples [][]byte) ([]byte, error) {
	total := 0
	for _, s := range samples {
		total += len(s)
	}
	step := 1
	if total > dictContentMax {
		step = (total + dictContentMax - 1) / dictContentMax
	}
	for {
		d, err := zstd.BuildDict(zstd.BuildDictOptions{
			ID: id, Contents: samples, History: dictHistory(samples, step), Offsets: [3]int{1, 4, 8}, Level: zstd.SpeedFastest,
		})
		if err == nil || step >= len(samples) {
			return d, err
		}
		step *= 2
	}
}

// dictHistory lays every step-th sample end to end, from the most recent
// back, up to dictContentMax bytes.
func dictHistory(samples [][]byte, step int) []byte {
	var picked [][]byte
	size := 0
	for i := len(samples) - 1; i >= 0 && size < dictContentMax; i -= step {
		if size+len(samples[i]) > dictContentMax {
			continue
		}
		picked = append(picked, samples[i])
		size += len(samples[i])
	}
	history := make([]byte, 0, size)
	for i := len(picked) - 1; i >= 0; i-- {
		history = append(history, picked[i]...)
	}
	return history
}

// currentID is the current dictionary's id, training it if needed.
func (c *codecs) currentID(ctx context.Context) (uint32, error) {
	d, err := c.dictionary(ctx)
	if err != nil {
		return 0, err
	}
	return d.id, nil
}

// payload returns the bytes a subscriber with the given compression gets.
func (f *frame) payload(c *codecs, compress bool, d *zdict) []byte {
	switch {
	case !compress:
		return f.json
	case d == nil:
		return f.z.get(func() []byte {
			z := c.plain.EncodeAll(f.json, make([]byte, 0, len(f.json)/2+16))
			f.ent.Charge(cap(z))
			return z
		})
	default:
		return f.d.get(func() []byte {
			z := d.enc.EncodeAll(f.json, make([]byte, 0, len(f.json)/3+16))
			f.ent.Charge(cap(z))
			return z
		})
	}
}

// deflated returns the JSON compressed as one permessage-deflate message,
// made once and shared by every deflate subscriber.
func (f *frame) deflated() []byte {
	return f.f.get(func() []byte {
		var w sliceWriter
		b := w.appendDeflate(make([]byte, 0, len(f.json)/2+16), f.json)
		f.ent.Charge(cap(b))
		return b
	})
}

// rendererPool holds Renderers with Cursor set, for live frames.
var cursorRenderers = sync.Pool{New: func() any { return &Renderer{Cursor: true} }}

// scratchPool holds render buffers for live frames.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// liveFrame returns the shared frame of a live entry, rendering it if no
// subscriber has yet. first is true for the caller whose rendering was kept
// (so a render error is counted once).
func liveFrame(e *archive.LiveEntry) (f *frame, first bool) {
	if m := e.Memo(); m != nil {
		return m.(*frame), false
	}
	f = &frame{ent: e}
	r := cursorRenderers.Get().(*Renderer)
	bp := scratchPool.Get().(*[]byte)
	out, err := r.AppendJSON((*bp)[:0], e.Event)
	if err != nil {
		f.err = err
	} else {
		f.json = append(make([]byte, 0, len(out)), out...)
	}
	*bp = out[:0]
	scratchPool.Put(bp)
	cursorRenderers.Put(r)
	got := e.LoadOrStoreMemo(f).(*frame)
	if got != f {
		return got, false
	}
	e.Charge(int(unsafe.Sizeof(*f)) + cap(f.json))
	return f, true
}

// LiveJSON returns a live entry's /subscribe JSON (with its cursor), the
// same bytes every subscriber is sent: rendered once and kept in the
// entry's memo slot, shared with subscribers (and other readers such as
// the NATS sink). The bytes are shared: never modify them.
func LiveJSON(e *archive.LiveEntry) ([]byte, error) {
	f, _ := liveFrame(e)
	return f.json, f.err
}
