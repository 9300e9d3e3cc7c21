package subscribe

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"github.com/backstream/backstream/internal/citest"
)

// referenceResult runs the reference path, turning a panic into an error so a
// reference bug shows up as a test failure with the input, not a crash.
func referenceResult(rec []byte) (out []byte, err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			out, err, panicked = nil, fmt.Errorf("reference panicked: %v", p), true
		}
	}()
	out, err = AppendRecordJSONReference(nil, rec)
	return out, err, false
}

// equalToReference checks that the transcoder path (AppendRecordJSON)
// renders rec byte-for-byte like indigo's generic path, and fails exactly
// when it fails. It reports whether the transcoder handled rec itself (true)
// or deferred to the reference (false). Reusable for any record corpus.
//
// The one accepted difference: records nesting deeper than MaxRecordDepth are
// refused with ErrTooDeep where the reference renders them (or, far deeper,
// overflows the stack and kills the process, so it is not even asked).
func equalToReference(t testing.TB, rec []byte) (native bool) {
	t.Helper()
	var tc transcoder
	_, terr := tc.transcode(nil, rec)
	native = terr != errFallback
	if checkDepth(rec, 10_000) == ErrTooDeep {
		if _, err := AppendRecordJSON(nil, rec); !errors.Is(err, ErrTooDeep) {
			t.Fatalf("record nesting > 10000 deep not refused with ErrTooDeep: %v", err)
		}
		return native
	}
	want, werr, panicked := referenceResult(rec)
	// A prefix in dst must be kept, and left alone on error.
	prefix := []byte("PREFIX")
	got, gerr := AppendRecordJSON(append([]byte(nil), prefix...), rec)
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("dst prefix clobbered: %q\ninput: %x", got, rec)
	}
	got = got[len(prefix):]
	if errors.Is(gerr, ErrTooDeep) {
		if werr == nil && jsonDepth(want) <= MaxRecordDepth {
			t.Fatalf("ErrTooDeep but the reference output nests only %d deep: %s\ninput: %x", jsonDepth(want), want, rec)
		}
		return native
	}
	switch {
	case panicked:
		if gerr == nil {
			t.Fatalf("reference panicked (%v) but transcoder rendered %s\ninput: %x", werr, got, rec)
		}
	case werr != nil && gerr == nil:
		t.Fatalf("reference failed (%v) but transcoder rendered %s\ninput: %x", werr, got, rec)
	case werr == nil && gerr != nil:
		t.Fatalf("transcoder failed (%v) but reference rendered %s\ninput: %x", gerr, want, rec)
	case werr == nil && !bytes.Equal(got, want):
		t.Fatalf("output differs\ntranscoder: %s\nreference:  %s\ninput: %x", got, want, rec)
	}
	if gerr != nil {
		if !errors.Is(gerr, ErrBadRecord) {
			t.Fatalf("error %v does not wrap ErrBadRecord", gerr)
		}
		if len(got) != 0 {
			t.Fatalf("dst changed on error: %q", got)
		}
	} else if !json.Valid(got) {
		t.Fatalf("output is not valid JSON: %s", got)
	}
	return native
}

// jsonDepth is the deepest nesting of objects and arrays in valid JSON; never
// less than the CBOR nesting it was rendered from.
func jsonDepth(b []byte) int {
	depth, deepest, inStr := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '{' || c == '['):
			depth++
			deepest = max(deepest, depth)
		case !inStr && (c == '}' || c == ']'):
			depth--
		}
	}
	return deepest
}

// ---- building records with indigo ----

func testCID(codec uint64, data string) cid.Cid {
	c, err := cid.NewPrefixV1(codec, multihash.SHA2_256).Sum([]byte(data))
	if err != nil {
		panic(err)
	}
	return c
}

func recordCID(data string) atdata.CIDLink { return atdata.CIDLink(testCID(cid.DagCBOR, data)) }
func blobCID(data string) atdata.CIDLink   { return atdata.CIDLink(testCID(cid.Raw, data)) }

func mustCBOR(tb testing.TB, m map[string]any) []byte {
	tb.Helper()
	b, err := atdata.MarshalCBOR(m)
	if err != nil {
		tb.Fatalf("MarshalCBOR: %v", err)
	}
	return b
}

const nastyText = "quote\" backslash\\ slash/ ctl\x00\x01\x07\b\t\n\v\f\r\x1b\x1f del\x7f html<b>&amp;</b> " +
	"é ü 中文 עברית \u0301 emoji😀👩‍👩‍👧 flag🇫🇷 ls\u2028ps\u2029 bom\ufeff repl\ufffd nonchar\uffff astral𝄞"

func strongRef(n int) map[string]any {
	return map[string]any{
		"uri": fmt.Sprintf("at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l%011d", n),
		"cid": recordCID(fmt.Sprint("post", n)).String(),
	}
}

func imageBlob(n int, mime string) atdata.Blob {
	return atdata.Blob{Ref: blobCID(fmt.Sprint("img", n)), MimeType: mime, Size: int64(1000 + n*37)}
}

// namedRecord is one corpus entry: DAG-CBOR bytes and what they are.
type namedRecord struct {
	name    string
	cbor    []byte
	tooDeep bool // nests deeper than MaxRecordDepth: refused (the reference would render it)
}

// indigoCorpus is the hand-built record corpus: realistic Bluesky records and
// a custom NSID record exercising every data model type, all encoded by
// atdata.MarshalCBOR.
func indigoCorpus(tb testing.TB) []namedRecord {
	tb.Helper()
	manyKeys := map[string]any{"$type": "com.example.many"}
	for i := 0; i < 200; i++ {
		manyKeys[fmt.Sprintf("k%d_%s", i*7919%1000, strings.Repeat("x", i%5))] = int64(i)
	}
	recs := map[string]map[string]any{
		"post-simple": {
			"$type": "app.bsky.feed.post", "text": "hello world", "createdAt": "2024-11-05T10:11:12.345Z",
			"langs": []any{"en"},
		},
		"post-nasty-text": {
			"$type": "app.bsky.feed.post", "text": nastyText, "createdAt": "2024-11-05T10:11:12.345Z",
			"langs": []any{"en", "fr", "zh-Hant"},
			"tags":  []any{"<script>", "a&b", "\"q\""},
		},
		"post-invalid-utf8": {
			"$type": "app.bsky.feed.post", "text": "bad\xff\xfebytes \xed\xa0\x80surrogate \xe2\x82trunc \xc0\xafoverlong end\xe2",
			"createdAt": "2024-11-05T10:11:12.345Z",
		},
		"post-facets-reply": {
			"$type": "app.bsky.feed.post", "text": "@alice.test see https://example.com #tag",
			"createdAt": "2024-11-05T10:11:12.345Z",
			"reply":     map[string]any{"root": strongRef(1), "parent": strongRef(2)},
			"facets": []any{
				map[string]any{
					"index":    map[string]any{"byteStart": int64(0), "byteEnd": int64(11)},
					"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#mention", "did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz"}},
				},
				map[string]any{
					"index":    map[string]any{"byteStart": int64(16), "byteEnd": int64(35)},
					"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#link", "uri": "https://example.com/?a=1&b=<2>"}},
				},
				map[string]any{
					"index":    map[string]any{"byteStart": int64(36), "byteEnd": int64(40)},
					"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#tag", "tag": "tag"}},
				},
			},
		},
		"post-images": {
			"$type": "app.bsky.feed.post", "text": "pics", "createdAt": "2024-11-05T10:11:12.345Z",
			"embed": map[string]any{
				"$type": "app.bsky.embed.images",
				"images": []any{
					map[string]any{"alt": "a cat", "image": imageBlob(1, "image/jpeg"), "aspectRatio": map[string]any{"width": int64(2000), "height": int64(1500)}},
					map[string]any{"alt": "", "image": imageBlob(2, "image/png")},
					map[string]any{"alt": "weird <mime>", "image": imageBlob(3, "image/x-<&>\"q\"")},
					map[string]any{"alt": "zero", "image": atdata.Blob{Ref: blobCID("z"), MimeType: "image/webp", Size: 0}},
				},
			},
		},
		"post-quote": {
			"$type": "app.bsky.feed.post", "text": "quoting", "createdAt": "2024-11-05T10:11:12.345Z",
			"embed": map[string]any{"$type": "app.bsky.embed.record", "record": strongRef(3)},
		},
		"post-record-with-media": {
			"$type": "app.bsky.feed.post", "text": "rwm", "createdAt": "2024-11-05T10:11:12.345Z",
			"embed": map[string]any{
				"$type":  "app.bsky.embed.recordWithMedia",
				"record": map[string]any{"$type": "app.bsky.embed.record", "record": strongRef(4)},
				"media": map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{
					"uri": "https://example.com", "title": "T", "description": "D", "thumb": imageBlob(5, "image/jpeg"),
				}},
			},
		},
		"like": {
			"$type": "app.bsky.feed.like", "subject": strongRef(5), "createdAt": "2024-11-05T10:11:12.345Z",
		},
		"repost": {
			"$type": "app.bsky.feed.repost", "subject": strongRef(6), "createdAt": "2024-11-05T10:11:12.345Z",
		},
		"follow": {
			"$type": "app.bsky.graph.follow", "subject": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "createdAt": "2024-11-05T10:11:12.345Z",
		},
		"profile": {
			"$type": "app.bsky.actor.profile", "displayName": "Alice 🌈", "description": "line1\nline2 <b>bold</b>",
			"avatar": imageBlob(7, "image/jpeg"), "banner": imageBlob(8, "image/png"),
			"labels":     map[string]any{"$type": "com.atproto.label.defs#selfLabels", "values": []any{map[string]any{"val": "!no-unauthenticated"}}},
			"pinnedPost": strongRef(9),
		},
		"custom-everything": {
			"$type":  "com.example.thing",
			"bytes":  atdata.Bytes([]byte{0, 1, 2, 3, 0xfa, 0xfb, 0xfc}),
			"empty":  atdata.Bytes([]byte{}),
			"long":   atdata.Bytes(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100)),
			"ints":   []any{int64(0), int64(1), int64(-1), int64(23), int64(24), int64(-24), int64(-25), int64(255), int64(256), int64(65535), int64(65536), int64(math.MaxInt32), int64(math.MinInt32), int64(1 << 53), int64(-(1 << 53)), int64(math.MaxInt64), int64(math.MinInt64)},
			"nested": []any{[]any{}, []any{[]any{}}, []any{int64(1), []any{int64(2), []any{int64(3), nil}}}},
			"null":   nil, "t": true, "f": false,
			"link": recordCID("x"), "links": []any{recordCID("a"), blobCID("b")},
			"emptyMap": map[string]any{}, "emptyStr": "", "emptyArr": []any{},
			"": "empty key", "b": "b", "aa": "aa", "B": "B", "_": "_", "~": "~", "é": "e-acute", "z\"q": "quote key",
			"ctl\nkey": "newline key", "<k>": "html key", "😀": "emoji key",
			"notblob":  map[string]any{"$type": "blobby", "ref": recordCID("nb"), "mimeType": "x", "size": int64(1)},
			"fourkeys": map[string]any{"ref": recordCID("fk"), "mimeType": "x", "size": int64(1), "other": "y"},
			"negblob":  atdata.Blob{Ref: blobCID("neg"), MimeType: "image/<neg>", Size: -1},
			"hugeblob": atdata.Blob{Ref: blobCID("huge"), MimeType: "video/mp4", Size: math.MaxInt64},
		},
		"many-keys": manyKeys,
	}
	var out []namedRecord
	for _, name := range sortedKeys(recs) {
		out = append(out, namedRecord{name: name, cbor: mustCBOR(tb, recs[name])})
	}
	// Deep nesting around the transcoder's limit (beyond it: reference path).
	for _, d := range []int{1, 10, MaxRecordDepth - 1, MaxRecordDepth, MaxRecordDepth + 1, 3 * MaxRecordDepth} {
		var v any = "leaf"
		for i := 1; i < d; i++ {
			if i%2 == 0 {
				v = map[string]any{"d": v}
			} else {
				v = []any{v}
			}
		}
		out = append(out, namedRecord{name: fmt.Sprintf("depth-%d", d), cbor: mustCBOR(tb, map[string]any{"$type": "com.example.deep", "v": v}), tooDeep: d > MaxRecordDepth})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Deterministic order for readable failures.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// ---- random records ----

var randRunes = []rune("aZ09 _-.:/\"\\<>&'\x00\x01\x1f\x7f\u00e9\u0301\u2028\u2029\ufeff\ufffd\uffff中😀𝄞👩\u200d")

func randString(r *rand.Rand, max int) string {
	n := r.IntN(max + 1)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if r.IntN(50) == 0 {
			sb.WriteByte(byte(0x80 + r.IntN(0x80))) // stray invalid UTF-8
			continue
		}
		sb.WriteRune(randRunes[r.IntN(len(randRunes))])
	}
	return sb.String()
}

func randValue(r *rand.Rand, depth int) any {
	k := r.IntN(12)
	if depth > 5 && k >= 9 {
		k = r.IntN(9)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int64(r.Uint64())
	case 3:
		return int64(r.IntN(2000)) - 1000
	case 4, 5:
		return randString(r, 30)
	case 6:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return atdata.Bytes(b)
	case 7:
		return recordCID(fmt.Sprint(r.Uint64()))
	case 8:
		size := int64(r.IntN(1 << 20))
		if r.IntN(10) == 0 {
			size = -1
		}
		return atdata.Blob{Ref: blobCID(fmt.Sprint(r.Uint64())), MimeType: randString(r, 12), Size: size}
	case 9, 10:
		m := map[string]any{}
		for i, n := 0, r.IntN(8); i < n; i++ {
			m[randString(r, 8)] = randValue(r, depth+1)
		}
		if r.IntN(3) == 0 {
			m["$type"] = "com.example." + randString(r, 5) + "x"
		}
		return m
	default:
		a := make([]any, r.IntN(6))
		for i := range a {
			a[i] = randValue(r, depth+1)
		}
		return a
	}
}

func randRecord(r *rand.Rand) map[string]any {
	m := map[string]any{"$type": "com.example.rand"}
	for i, n := 0, r.IntN(10); i < n; i++ {
		m[randString(r, 10)] = randValue(r, 1)
	}
	return m
}

// ---- hand-made CBOR for the shapes indigo never writes ----

// hd encodes a CBOR head in its shortest form.
func hd(major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return []byte{m | byte(n)}
	case n <= math.MaxUint8:
		return []byte{m | 24, byte(n)}
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16([]byte{m | 25}, uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32([]byte{m | 26}, uint32(n))
	}
	return binary.BigEndian.AppendUint64([]byte{m | 27}, n)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func ts(s string) []byte         { return cat(hd(3, uint64(len(s))), []byte(s)) }
func x(h string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// m1 is a one-entry map {"a": v}.
func m1(v []byte) []byte { return cat(x("a1 61 61"), v) }

// linkBytes is the tag-42 form of c.
func linkBytes(c cid.Cid) []byte {
	raw := append([]byte{0}, c.Bytes()...)
	return cat(x("d8 2a"), hd(2, uint64(len(raw))), raw)
}

// rawCase is a hand-made input with the outcome we expect from the reference
// (checked too, so a changed indigo is noticed): "" means it must fail.
type rawCase struct {
	name   string
	cbor   []byte
	want   string // expected JSON; "" = error
	native bool   // the transcoder must handle it without the reference
}

func rawCases() []rawCase {
	v1 := testCID(cid.DagCBOR, "v1")
	v0, _ := cid.Decode("QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n")
	dagJSON := cid.NewCidV1(0x0129, v1.Hash())
	sha512, _ := cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_512).Sum([]byte("x"))
	big := make([]byte, 0, 131073+8)
	big = append(big, x("a1 61 61")...)
	bigArr := func(n int) []byte {
		b := cat(x("a1 61 61"), hd(4, uint64(n)))
		return append(b, make([]byte, n)...) // n zeros (uint 0)
	}
	_ = big
	key8192, key8193 := strings.Repeat("k", 8192), strings.Repeat("k", 8193)
	return []rawCase{
		{"top-null", x("f6"), "{}", true},
		{"top-undefined", x("f7"), "{}", true},
		{"top-empty-map", x("a0"), "{}", true},
		{"top-trailing-garbage", x("a0 ff ff 00"), "{}", true},
		{"top-array", x("80"), "", true},
		{"top-int", x("01"), "", true},
		{"top-text", ts("x"), "", true},
		{"empty-input", nil, "", true},
		{"top-tagged-map", x("d8 2a a0"), "{}", false},
		{"top-tagged-null", x("c1 f6"), "{}", false},
		{"top-indefinite-map", cat(x("bf"), ts("a"), x("01 ff")), `{"a":1}`, false},
		{"indefinite-array", m1(x("9f 01 02 ff")), `{"a":[1,2]}`, false},
		{"indefinite-text", m1(cat(x("7f"), ts("ab"), ts("c"), x("ff"))), `{"a":"abc"}`, false},
		{"indefinite-bytes", m1(x("5f 41 01 42 02 03 ff")), `{"a":{"$bytes":"AQID"}}`, false},
		{"indefinite-key", cat(x("a1 7f"), ts("k"), x("ff 01")), `{"k":1}`, false},
		{"tagged-key", cat(x("a1 c1"), ts("k"), x("01")), `{"k":1}`, false},
		{"nonminimal-int-1", m1(x("18 01")), `{"a":1}`, true},
		{"nonminimal-int-2", m1(x("19 00 01")), `{"a":1}`, true},
		{"nonminimal-int-8", m1(x("1b 00 00 00 00 00 00 00 01")), `{"a":1}`, true},
		{"nonminimal-len", cat(x("b9 00 01 78 01 61 01")), `{"a":1}`, true},
		{"uint-max-wraps", m1(x("1b ff ff ff ff ff ff ff ff")), `{"a":-1}`, true},
		{"uint-2^63-wraps", m1(x("1b 80 00 00 00 00 00 00 00")), `{"a":-9223372036854775808}`, true},
		{"negint-min", m1(x("3b 7f ff ff ff ff ff ff ff")), `{"a":-9223372036854775808}`, true},
		{"negint-overflow", m1(x("3b 80 00 00 00 00 00 00 00")), "", true},
		{"negint-max-arg-wraps", m1(x("3b ff ff ff ff ff ff ff ff")), `{"a":0}`, true},
		{"bad-ai-28", m1(x("1c")), "", true},
		{"bad-ai-31-uint", m1(x("1f")), "", true},
		{"bad-ai-31-negint", m1(x("3f")), "", true},
		{"float16-one", m1(x("f9 3c 00")), `{"a":1}`, true},
		{"float16-neg-zero", m1(x("f9 80 00")), `{"a":0}`, true},
		{"float16-half", m1(x("f9 38 00")), "", true},
		{"float16-inf", m1(x("f9 7c 00")), "", true},
		{"float16-nan", m1(x("f9 7e 00")), "", true},
		{"float16-max", m1(x("f9 7b ff")), `{"a":65504}`, true},
		{"float32-big", m1(x("fa 4b 80 00 00")), `{"a":16777216}`, true},
		{"float64-1.5", m1(x("fb 3f f8 00 00 00 00 00 00")), "", true},
		{"float64-2^63", m1(x("fb 43 e0 00 00 00 00 00 00")), "", true},
		{"float64-minus-2^63", m1(x("fb c3 e0 00 00 00 00 00 00")), `{"a":-9223372036854775808}`, true},
		{"float-truncated", m1(x("fb 3f f8")), "", true},
		{"simple-0", m1(x("e0")), "", true},
		{"simple-1byte", m1(x("f8 20")), "", true},
		{"break-as-value", m1(x("ff")), "", true},
		{"reserved-fc", m1(x("fc")), "", true},
		{"tag-1", m1(x("c1 01")), "", true},
		{"tag-42-empty", m1(x("d8 2a 40")), "", true},
		{"tag-42-no-prefix", m1(cat(x("d8 2a 58 24"), v1.Bytes())), "", true},
		{"tag-42-null", m1(x("d8 2a f6")), "", true},
		{"tag-42-text", m1(cat(x("d8 2a"), ts("bafy"))), "", true},
		{"tag-42-twice", m1(cat(x("d8 2a"), linkBytes(v1))), "", true},
		{"tag-42-nonminimal", m1(cat(x("d9 00 2a"), linkBytes(v1)[2:])), `{"a":{"$link":"` + v1.String() + `"}}`, true},
		{"tag-42-indefinite-bytes", m1(cat(x("d8 2a 5f"), hd(2, 1), []byte{0}, hd(2, uint64(len(v1.Bytes()))), v1.Bytes(), x("ff"))), `{"a":{"$link":"` + v1.String() + `"}}`, false},
		{"tag-42-trailing-cid-bytes", m1(cat(x("d8 2a 58 26 00"), v1.Bytes(), x("00"))), "", true},
		{"cid-v0", m1(linkBytes(v0)), `{"a":{"$link":"` + v0.String() + `"}}`, true},
		{"cid-2byte-codec", m1(linkBytes(dagJSON)), `{"a":{"$link":"` + dagJSON.String() + `"}}`, true},
		{"cid-sha512", m1(linkBytes(sha512)), `{"a":{"$link":"` + sha512.String() + `"}}`, true},
		{"key-not-text", x("a1 01 01"), "", true},
		{"key-bytes", x("a1 41 61 01"), "", true},
		{"key-repeated", cat(x("a2"), ts("a"), x("01"), ts("a"), x("02")), "", true},
		{"key-repeated-unsorted", cat(x("a3"), ts("b"), x("01"), ts("a"), x("02"), ts("b"), x("03")), "", true},
		{"key-8192", cat(x("a1"), ts(key8192), x("01")), `{"` + key8192 + `":1}`, true},
		{"key-8193", cat(x("a1"), ts(key8193), x("01")), "", true},
		{"key-invalid-utf8", x("a1 62 ff fe 01"), `{"\ufffd\ufffd":1}`, true},
		{"keys-length-vs-bytes", cat(x("a3"), ts("b"), x("01"), ts("aa"), x("02"), ts("B"), x("03")), `{"B":3,"aa":2,"b":1}`, true},
		{"string-too-long-claim", m1(x("7a 7f ff ff ff")), "", true},
		{"string-truncated", m1(x("63 61 62")), "", true},
		{"bytes-truncated", m1(x("43 61 62")), "", true},
		{"map-truncated", x("a2 61 61 01"), "", true},
		{"array-truncated", m1(x("83 01 02")), "", true},
		{"huge-array-claim", m1(x("9b 00 00 01 00 00 00 00 00")), "", true},
		{"array-131072", bigArr(131072), "", true}, // want filled below
		{"array-131073", bigArr(131073), "", true},
		{"type-empty", cat(x("a1"), ts("$type"), ts("")), "", true},
		{"type-int", cat(x("a1"), ts("$type"), x("01")), "", true},
		{"type-null", cat(x("a1"), ts("$type"), x("f6")), "", true},
		{"top-blob", cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), x("01"), ts("mimeType"), ts("a")), "", true},
		{"blob-3-fields", m1(cat(x("a3"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), x("01"))), "", true},
		{"blob-size-text", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), ts("1"), ts("mimeType"), ts("a"))), "", true},
		{"blob-size-float", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), x("f9 40 00"), ts("mimeType"), ts("a"))), `{"a":{"$type":"blob","ref":{"$link":"` + v1.String() + `"},"mimeType":"a","size":2}}`, true},
		{"blob-size-huge-uint", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), x("1b ff ff ff ff ff ff ff ff"), ts("mimeType"), ts("<a>"))), `{"a":{"cid":"` + v1.String() + `","mimeType":"\u003ca\u003e"}}`, true},
		{"blob-mime-int", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), linkBytes(v1), ts("size"), x("01"), ts("mimeType"), x("01"))), "", true},
		{"blob-ref-text", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), ts("bafy"), ts("size"), x("01"), ts("mimeType"), ts("a"))), "", true},
		{"blob-ref-map-link", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), x("a1"), ts("$link"), ts(v1.String()), ts("size"), x("01"), ts("mimeType"), ts("a"))), `{"a":{"$type":"blob","ref":{"$link":"` + v1.String() + `"},"mimeType":"a","size":1}}`, false},
		{"blob-ref-map-other", m1(cat(x("a4"), ts("$type"), ts("blob"), ts("ref"), x("a1"), ts("x"), ts("y"), ts("size"), x("01"), ts("mimeType"), ts("a"))), "", true},
		{"legacy-blob-text-cid", m1(cat(x("a2"), ts("cid"), ts(v1.String()), ts("mimeType"), ts("image/png"))), `{"a":{"cid":"` + v1.String() + `","mimeType":"image/png"}}`, false},
		{"legacy-blob-link-cid", m1(cat(x("a2"), ts("cid"), linkBytes(v1), ts("mimeType"), ts("image/png"))), `{"a":{"cid":"` + v1.String() + `","mimeType":"image/png"}}`, false},
		{"json-link-object", m1(cat(x("a1"), ts("$link"), ts(v1.String()))), `{"a":{"$link":"` + v1.String() + `"}}`, false},
		{"json-link-base58", m1(cat(x("a1"), ts("$link"), ts(v0.String()))), `{"a":{"$link":"` + v0.String() + `"}}`, false},
		{"json-link-bad", m1(cat(x("a1"), ts("$link"), ts("nope"))), "", false},
		{"json-link-extra", m1(cat(x("a2"), ts("$link"), ts(v1.String()), ts("x"), x("01"))), "", false},
		{"json-bytes-object", m1(cat(x("a1"), ts("$bytes"), ts("AQID"))), `{"a":{"$bytes":"AQID"}}`, false},
		{"json-bytes-noncanonical", m1(cat(x("a1"), ts("$bytes"), ts("AR"))), `{"a":{"$bytes":"AQ"}}`, false},
		{"top-json-link", cat(x("a1"), ts("$link"), ts(v1.String())), "", false},
		{"string-invalid-utf8", m1(x("64 ed a0 80 ff")), `{"a":"\ufffd\ufffd\ufffd\ufffd"}`, true},
		{"string-line-separators", m1(ts("\u2028\u2029")), `{"a":"\u2028\u2029"}`, true},
	}
}

func TestTranscodeRawCases(t *testing.T) {
	for _, c := range rawCases() {
		t.Run(c.name, func(t *testing.T) {
			native := equalToReference(t, c.cbor)
			if native != c.native {
				t.Errorf("native = %v, want %v", native, c.native)
			}
			if strings.HasPrefix(c.name, "array-131072") {
				return // checked for equality only
			}
			got, err := AppendRecordJSON(nil, c.cbor)
			if c.want == "" {
				if err == nil {
					t.Errorf("want an error, got %s", got)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Errorf("got %s (%v), want %s", got, err, c.want)
			}
		})
	}
}

func TestTranscodeIndigoCorpus(t *testing.T) {
	for _, r := range indigoCorpus(t) {
		t.Run(r.name, func(t *testing.T) {
			if native := equalToReference(t, r.cbor); !native {
				t.Errorf("transcoder deferred to the reference path")
			}
			_, err := AppendRecordJSON(nil, r.cbor)
			if got := errors.Is(err, ErrTooDeep); got != r.tooDeep {
				t.Errorf("ErrTooDeep = %v, want %v (err %v)", got, r.tooDeep, err)
			}
		})
	}
}

func TestTranscodeRandomRecords(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	r := rand.New(rand.NewPCG(1, 2))
	var shared Renderer // one warm Renderer across all records: no state may leak between them
	for i := 0; i < n; i++ {
		rec := mustCBOR(t, randRecord(r))
		if !equalToReference(t, rec) {
			t.Fatalf("record %d deferred to the reference path: %x", i, rec)
		}
		want, _ := AppendRecordJSONReference(nil, rec)
		if got, err := shared.AppendRecordJSON(nil, rec); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("record %d with a reused Renderer: %s (%v)\nwant %s", i, got, err, want)
		}
	}
}

// Every half-precision float, checked against refmt's own conversion.
func TestTranscodeAllHalfFloats(t *testing.T) {
	citest.Long(t, "65536 reference renders")
	for h := 0; h < 1<<16; h++ {
		equalToReference(t, m1([]byte{0xf9, byte(h >> 8), byte(h)}))
	}
}

func TestTranscodeEveryByteAfterKey(t *testing.T) {
	// Every initial byte as a value, followed by enough zero bytes to satisfy
	// any argument: covers every major type / additional-info pair.
	for b := 0; b < 256; b++ {
		equalToReference(t, cat(x("a1 61 61"), []byte{byte(b)}, make([]byte, 9)))
		equalToReference(t, cat(x("a1"), []byte{byte(b)}, make([]byte, 9)))
		equalToReference(t, cat([]byte{byte(b)}, make([]byte, 9)))
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	inputs := []string{"", nastyText, "\xff", "\xed\xa0\x80", "a\u2028b", "\xe2\x80", "\xe2\x80\xa8"}
	for i := 0; i < 2000; i++ {
		inputs = append(inputs, randString(r, 40))
	}
	for b := 0; b < 256; b++ {
		inputs = append(inputs, string([]byte{byte(b)}), string([]byte{'a', byte(b), 'z'}))
		// Every byte at every position of the 8-byte fast path.
		for p := 0; p < 17; p++ {
			s := []byte(strings.Repeat("abcdefgh", 3))
			s[p] = byte(b)
			inputs = append(inputs, string(s))
		}
	}
	for _, s := range inputs {
		for _, html := range []bool{false, true} {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(html)
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSuffix(buf.String(), "\n")
			if got := string(appendJSONString(nil, s, html)); got != want {
				t.Fatalf("html=%v %q: got %s want %s", html, s, got, want)
			}
			// As a slice with spare capacity holding bytes that would need
			// escaping, and without spare capacity.
			b := append([]byte(s), "\"\x00\xff\\<\n\u2028"...)[:len(s)]
			if got := string(appendJSONBytes(nil, b, html)); got != want {
				t.Fatalf("[]byte html=%v %q: got %s want %s", html, s, got, want)
			}
			if got := string(appendJSONBytes(nil, []byte(s)[:len(s):len(s)], html)); got != want {
				t.Fatalf("[]byte html=%v %q: got %s want %s", html, s, got, want)
			}
		}
	}
}

// The record JSON keeps <, > and & as they are (HTML escaping off), except in
// a blob's mimeType, which atdata renders with json.Marshal.
func TestRecordJSONHTMLEscaping(t *testing.T) {
	rec := mustCBOR(t, map[string]any{
		"$type": "app.bsky.feed.post", "text": "a<b>&c",
		"img": atdata.Blob{Ref: blobCID("h"), MimeType: "image/<x>&", Size: 1},
	})
	got, err := AppendRecordJSON(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte(`"text":"a<b>&c"`)) {
		t.Errorf("text was HTML-escaped: %s", got)
	}
	if !bytes.Contains(got, []byte(`"mimeType":"image/\u003cx\u003e\u0026"`)) {
		t.Errorf("blob mimeType not HTML-escaped as atdata does: %s", got)
	}
	equalToReference(t, rec)
}

func TestTranscodeRejectsOversizeRecord(t *testing.T) {
	s := strings.Repeat("a", atdata.MAX_CBOR_RECORD_SIZE)
	rec := cat(x("a1"), ts("a"), ts(s))
	if _, err := AppendRecordJSON(nil, rec); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("err = %v, want ErrBadRecord", err)
	}
	equalToReference(t, rec)
}

// A 1 MiB record of nested arrays: the reference path would overflow the
// stack and kill the process; the transcoder refuses it, and so does the
// fallback guard when the nesting hides behind a shape the transcoder defers.
func TestDeepRecordRefusedWithoutRecursion(t *testing.T) {
	n := atdata.MAX_CBOR_RECORD_SIZE - 16
	nest := bytes.Repeat([]byte{0x81}, n)
	for name, rec := range map[string][]byte{
		"definite":         cat(x("a1 61 61"), nest, x("01")),
		"indefinite-outer": cat(x("bf 61 61"), nest, x("01 ff")),
		"indefinite-inner": cat(x("a1 61 61"), bytes.Repeat([]byte{0x9f}, n/2), x("01"), bytes.Repeat([]byte{0xff}, n/2)),
		"tagged-top":       cat(x("d8 2a a1 61 61"), nest, x("01")),
		// Non-minimal heads behind an indefinite map: the guard reads
		// them as the reference does (leniently), or it would let the
		// reference recurse.
		"indefinite-outer-nonminimal": cat(x("bf 78 01 61"), bytes.Repeat([]byte{0x98, 0x01}, n/2), x("01 ff")),
	} {
		_, err := AppendRecordJSON(nil, rec)
		if !errors.Is(err, ErrTooDeep) || !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err = %v, want ErrTooDeep and ErrBadRecord", name, err)
		}
	}
}
