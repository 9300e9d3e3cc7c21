package subscribe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/zstd"
)

// readJSONStream reads n text messages.
func readJSONStream(t *testing.T, c *websocket.Conn, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for len(out) < n {
		_, b, err := readEvent(t, c, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// readBinary reads n binary messages.
func readBinary(t *testing.T, c *websocket.Conn, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for len(out) < n {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, b, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if typ != websocket.BinaryMessage {
			t.Fatalf("message type %d, want binary", typ)
		}
		out = append(out, b)
	}
	return out
}

// unrelatedDictionary is a zstd dictionary trained on text that has nothing
// to do with backstream, standing in for the one Jetstream clients embed.
func unrelatedDictionary(t *testing.T) []byte {
	var samples [][]byte
	for i := 0; i < 400; i++ {
		samples = append(samples, []byte(fmt.Sprintf("<record id=%d><name>item number %d</name><price currency=\"EUR\">%d.%02d</price><tags>alpha beta gamma</tags></record>", i, i*7, i%97, i%100)))
	}
	d, err := dict.BuildZstdDict(samples, dict.Options{MaxDictSize: 8 << 10, HashBytes: 6, ZstdDictID: 777777})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCompressedStream: compress=true and the Socket-Encoding: zstd header
// (what the official Jetstream client sends) both give one dictionary-less
// zstd frame per event, which a plain decoder and a decoder preloaded with
// an unrelated dictionary (as Jetstream clients are) both decode to exactly
// the JSON stream. Live frames are compressed once and shared.
func TestCompressedStream(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 32 << 10})
	const n = 300
	h.commit(genEvents(t, 0, n, 5)...)
	plainConn := h.dial("?cursor=0", nil)
	want := readJSONStream(t, plainConn, n)
	plainConn.Close()

	plain, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	jetstreamLike, err := zstd.NewReader(nil, zstd.WithDecoderDicts(unrelatedDictionary(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer jetstreamLike.Close()

	hdr := http.Header{}
	hdr.Set("Socket-Encoding", "zstd")
	for _, tc := range []struct {
		name  string
		query string
		hdr   http.Header
	}{
		{"compress=true", "?cursor=0&compress=true", nil},
		{"Socket-Encoding header", "?cursor=0", hdr},
		{"header beats compress=false", "?cursor=0&compress=false", hdr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.dial(tc.query, tc.hdr)
			defer c.Close()
			frames := readBinary(t, c, n)
			for i, f := range frames {
				if fh := new(zstd.Header); fh.Decode(f) != nil || fh.DictionaryID != 0 {
					t.Fatalf("frame %d: header %+v, want no dictionary", i, fh)
				}
				for name, d := range map[string]*zstd.Decoder{"plain": plain, "dictionary-preloaded": jetstreamLike} {
					got, err := d.DecodeAll(f, nil)
					if err != nil {
						t.Fatalf("%s decoder, frame %d: %v", name, i, err)
					}
					if !bytes.Equal(got, want[i]) {
						t.Fatalf("%s decoder, frame %d:\n got %s\nwant %s", name, i, got, want[i])
					}
				}
			}
		})
	}

	// Live: two compressed subscribers get the very same frame bytes. Their
	// start is resolved before the upgrade is answered: once dialed, both
	// see the commit.
	a := h.dial("?compress=true", nil)
	b := h.dial("", hdr)
	defer a.Close()
	defer b.Close()
	first, _ := h.commit(genEvents(t, n, 20, 5)...)
	fa, fb := readBinary(t, a, 20), readBinary(t, b, 20)
	ents, _ := h.w.Live().ReadEntries(first, nil, 20)
	for i := range fa {
		shared := ents[i].Memo().(*frame).z.b
		if !bytes.Equal(fa[i], fb[i]) || !bytes.Equal(fa[i], shared) {
			t.Fatalf("live frame %d differs between subscribers or from the shared one", i)
		}
		js, err := jetstreamLike.DecodeAll(fa[i], nil)
		if err != nil || !strings.Contains(string(js), `"cursor":`+strconv.FormatUint(first+uint64(i), 10)) {
			t.Fatalf("live frame %d: %s %v", i, js, err)
		}
	}
}

// TestDictionary: zstdDictionary=<id> gives frames made with backstream's
// own dictionary, served at /zstd-dictionary; decoding with it gives the
// JSON stream, and the frames are smaller than dictionary-less ones.
func TestDictionary(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{DictSamples: 200}})
	const n = 400
	resp, err := http.Get(h.url("/zstd-dictionary"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("dictionary before enough events: %d", resp.StatusCode)
	}
	h.commit(genEvents(t, 0, n, 9)...)
	resp, err = http.Get(h.url("/zstd-dictionary"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id, err := strconv.ParseUint(resp.Header.Get("X-Zstd-Dictionary-Id"), 10, 32)
	if resp.StatusCode != 200 || err != nil || len(raw) == 0 {
		t.Fatalf("dictionary: %d, id %q, %d bytes", resp.StatusCode, resp.Header.Get("X-Zstd-Dictionary-Id"), len(raw))
	}
	c := h.dial("?cursor=0", nil)
	want := readJSONStream(t, c, n)
	c.Close()
	c = h.dial(fmt.Sprintf("?cursor=0&zstdDictionary=%d", id), nil)
	withDict := readBinary(t, c, n)
	c.Close()
	c = h.dial("?cursor=0&compress=true", nil)
	noDict := readBinary(t, c, n)
	c.Close()
	dec, err := zstd.NewReader(nil, zstd.WithDecoderDicts(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var sumDict, sumPlain, sumJSON int
	for i := range withDict {
		got, err := dec.DecodeAll(withDict[i], nil)
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Fatalf("frame %d: %v\n got %s\nwant %s", i, err, got, want[i])
		}
		sumDict += len(withDict[i])
		sumPlain += len(noDict[i])
		sumJSON += len(want[i])
	}
	t.Logf("bytes/event: JSON %.0f, zstd %.0f, zstd+dictionary %.0f", float64(sumJSON)/n, float64(sumPlain)/n, float64(sumDict)/n)
	if sumDict >= sumPlain {
		t.Errorf("the dictionary does not help: %d ≥ %d bytes", sumDict, sumPlain)
	}
	// The dictionary is stored: a second server over the same archive
	// serves the same one.
	s2, err := New(Config{Store: h.store, Writer: h.w, Logger: quiet, DictSamples: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	d2, err := s2.codecs.dictionary(context.Background())
	if err != nil || uint64(d2.id) != id || !bytes.Equal(d2.raw, raw) {
		t.Fatalf("second training: id %d vs %d, same bytes %v, %v", d2.id, id, bytes.Equal(d2.raw, raw), err)
	}
}
