package world

// records.go owns record generation: a realistic mix of Bluesky and
// non-Bluesky records built as map[string]any for atdata.MarshalCBOR (no
// floats: atdata rejects them). Record keys and createdAt come from a logical
// per-account clock, so record CIDs are a pure function of the seed.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
)

// Collections the generator produces.
const (
	colPost      = "app.bsky.feed.post"
	colLike      = "app.bsky.feed.like"
	colRepost    = "app.bsky.feed.repost"
	colFollow    = "app.bsky.graph.follow"
	colBlock     = "app.bsky.graph.block"
	colProfile   = "app.bsky.actor.profile"
	colGenerator = "app.bsky.feed.generator"
	colFrontpage = "fyi.unravel.frontpage.post"
	colThing     = "com.example.thing"
)

// genEpoch is the logical start of record time (2023-04-01T00:00:00Z).
var genEpoch = time.Date(2023, 4, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

var (
	dagCBORPrefix = cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_256)
	rawPrefix     = cid.NewPrefixV1(cid.Raw, multihash.SHA2_256)
)

var words = strings.Fields(`the a of to and in is it you that was for on are with as
I his they be at one have this from or had by hot word but what some we can out other
were all there when up use your how said an each she which do their time if will way
about many then them write would like so these her long make thing see him two has look
more day could go come did number sound no most people my over know water than call first
who may down side been now find any new work part take get place made live where after
back little only round man year came show every good me give our under name very through
just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read
hand port large spell add even land here must big high such follow act why ask men change
went light kind off need house picture try us again animal point mother world near build
self earth father head stand own page should country found answer school grow study still
learn plant cover food sun four between state keep eye never last let thought city tree
cross farm hard start might story saw far sea draw left late run don't while press close
night real life few north café naïve 日本語 ここ ação coração firehose relay atproto skeet
bsky repo commit backfill jetstream`)

// recordGen generates records for one account. It is not safe for
// concurrent use; each account (and each Traffic) owns its own.
type recordGen struct {
	rng  *rand.Rand
	dids []string     // every DID of the world, index order (subjects)
	lt   *logicalTime // the account's logical clock
}

// logicalTime is an account's record clock: TID rkeys and createdAt values
// derive from it, strictly increasing, independent of wall time.
type logicalTime struct {
	clockID uint
	tcur    int64 // logical unix micros of the latest record
	seq     int   // counter for non-TID rkeys
}

func newLogicalTime(rng *rand.Rand) logicalTime {
	return logicalTime{
		clockID: uint(rng.IntN(1024)),
		tcur:    genEpoch + rng.Int64N(365*24*3600*1e6),
	}
}

type genRecord struct {
	collection string
	rkey       string
	rec        map[string]any
}

// advance moves the logical clock forward by 1 µs to maxStep µs.
func (g *recordGen) advance(maxStep int64) {
	g.lt.tcur += 1 + g.rng.Int64N(max(maxStep, 1))
}

func (g *recordGen) tid() string { return syntax.NewTID(g.lt.tcur, g.lt.clockID).String() }

func (g *recordGen) createdAt() string {
	return time.UnixMicro(g.lt.tcur).UTC().Format("2006-01-02T15:04:05.000Z")
}

func (g *recordGen) word() string { return words[g.rng.IntN(len(words))] }

// text returns words joined by spaces: at most n characters (runes) and at
// least min(n, 20).
func (g *recordGen) text(n int) string {
	var b strings.Builder
	chars := 0
	for chars < n {
		w := g.word()
		wl := utf8.RuneCountInString(w)
		if chars+wl+1 > n {
			if chars >= min(n, 20) {
				break
			}
			w, wl = "x", 1
		}
		if chars > 0 {
			b.WriteByte(' ')
			chars++
		}
		b.WriteString(w)
		chars += wl
	}
	return b.String()
}

func (g *recordGen) fakeCID(prefix cid.Prefix) cid.Cid {
	var b [16]byte
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	c, err := prefix.Sum(b[:])
	if err != nil {
		panic(fmt.Sprintf("world: cid sum: %v", err)) // sha2-256 over 16 bytes cannot fail
	}
	return c
}

func (g *recordGen) otherDID() string { return g.dids[g.rng.IntN(len(g.dids))] }

// strongRef points at a plausible post of some account of the world.
func (g *recordGen) strongRef() map[string]any {
	past := g.lt.tcur - g.rng.Int64N(30*24*3600*1e6)
	rkey := syntax.NewTID(past, uint(g.rng.IntN(1024))).String()
	return map[string]any{
		"uri": "at://" + g.otherDID() + "/" + colPost + "/" + rkey,
		"cid": g.fakeCID(dagCBORPrefix).String(),
	}
}

func (g *recordGen) blob(mime string) atdata.Blob {
	return atdata.Blob{
		Ref:      atdata.CIDLink(g.fakeCID(rawPrefix)),
		MimeType: mime,
		Size:     int64(10_000 + g.rng.IntN(900_000)),
	}
}

// kindWeights is the collection mix of generated records (profile excluded;
// it is created once per account).
var kindWeights = []struct {
	collection string
	weight     int
}{
	{colPost, 300},
	{colLike, 380},
	{colFollow, 140},
	{colRepost, 90},
	{colBlock, 20},
	{colFrontpage, 20},
	{colThing, 20},
	{colGenerator, 10},
}

func (g *recordGen) pickCollection() string {
	total := 0
	for _, k := range kindWeights {
		total += k.weight
	}
	r := g.rng.IntN(total)
	for _, k := range kindWeights {
		if r < k.weight {
			return k.collection
		}
		r -= k.weight
	}
	return colPost
}

// next advances the logical clock and generates a record of a random collection.
func (g *recordGen) next(maxStep int64) genRecord {
	g.advance(maxStep)
	return g.make(g.pickCollection())
}

// make generates a record of the given collection at the current logical time.
func (g *recordGen) make(collection string) genRecord {
	out := genRecord{collection: collection, rkey: g.tid()}
	switch collection {
	case colPost:
		out.rec = g.post()
	case colLike, colRepost:
		out.rec = map[string]any{"$type": collection, "subject": g.strongRef(), "createdAt": g.createdAt()}
	case colFollow, colBlock:
		out.rec = map[string]any{"$type": collection, "subject": g.otherDID(), "createdAt": g.createdAt()}
	case colProfile:
		out.rkey = "self"
		out.rec = g.profile()
	case colFrontpage:
		out.rec = map[string]any{
			"$type":     colFrontpage,
			"title":     g.text(20 + g.rng.IntN(60)),
			"url":       "https://example.com/" + g.tid(),
			"createdAt": g.createdAt(),
		}
	case colThing:
		g.lt.seq++
		switch g.rng.IntN(3) {
		case 0:
			out.rkey = fmt.Sprintf("thing-%d-%d", g.lt.seq, g.rng.IntN(1000))
		case 1:
			out.rkey = fmt.Sprintf("k:%d.v~%d", g.lt.seq, g.rng.IntN(100))
		default:
			out.rkey = fmt.Sprintf("Item_%d", g.lt.seq)
		}
		payload := make([]byte, 4+g.rng.IntN(28))
		for i := range payload {
			payload[i] = byte(g.rng.Uint32())
		}
		out.rec = map[string]any{
			"$type":     colThing,
			"name":      g.text(10 + g.rng.IntN(30)),
			"count":     int64(g.rng.IntN(1_000_000)),
			"ok":        g.rng.IntN(2) == 0,
			"tags":      []any{g.word(), g.word()},
			"ref":       atdata.CIDLink(g.fakeCID(dagCBORPrefix)),
			"payload":   atdata.Bytes(payload),
			"createdAt": g.createdAt(),
		}
	case colGenerator:
		g.lt.seq++
		out.rkey = fmt.Sprintf("feed-%d", g.lt.seq)
		out.rec = map[string]any{
			"$type":       colGenerator,
			"did":         "did:web:feeds.example.com",
			"displayName": g.text(8 + g.rng.IntN(16)),
			"description": g.text(20 + g.rng.IntN(100)),
			"createdAt":   g.createdAt(),
		}
	default:
		out.rec = map[string]any{"$type": collection, "createdAt": g.createdAt()}
	}
	return out
}

func (g *recordGen) profile() map[string]any {
	rec := map[string]any{
		"$type":       colProfile,
		"displayName": g.text(5 + g.rng.IntN(20)),
		"description": g.text(g.rng.IntN(160)),
		"createdAt":   g.createdAt(),
	}
	if g.rng.IntN(10) < 7 {
		rec["avatar"] = g.blob("image/jpeg")
	}
	if g.rng.IntN(10) < 3 {
		rec["banner"] = g.blob("image/png")
	}
	return rec
}

var postLangs = [][]any{{"en"}, {"en"}, {"en"}, {"ja"}, {"pt"}, {"de"}, {"en", "es"}}

func (g *recordGen) post() map[string]any {
	// Text length: lognormal around 70 bytes, clamped to 20..300.
	n := int(math.Exp(4.2 + 0.7*g.rng.NormFloat64()))
	n = min(max(n, 20), 300)
	rec := map[string]any{"$type": colPost, "createdAt": g.createdAt()}
	if r := g.rng.IntN(10); r < 7 {
		rec["langs"] = postLangs[g.rng.IntN(len(postLangs))]
	}
	var facets []any
	suffix := ""
	if g.rng.IntN(100) < 20 {
		var feature map[string]any
		switch g.rng.IntN(3) {
		case 0:
			u := "https://example.com/" + g.word()
			suffix = u
			feature = map[string]any{"$type": "app.bsky.richtext.facet#link", "uri": u}
		case 1:
			suffix = fmt.Sprintf("@user%d.test", g.rng.IntN(len(g.dids)))
			feature = map[string]any{"$type": "app.bsky.richtext.facet#mention", "did": g.otherDID()}
		default:
			t := strings.ReplaceAll(g.word(), "'", "")
			suffix = "#" + t
			feature = map[string]any{"$type": "app.bsky.richtext.facet#tag", "tag": t}
		}
		body := g.text(max(n-len(suffix)-1, 20))
		start := int64(len(body) + 1)
		rec["text"] = body + " " + suffix
		facets = append(facets, map[string]any{
			"index":    map[string]any{"byteStart": start, "byteEnd": start + int64(len(suffix))},
			"features": []any{feature},
		})
		rec["facets"] = facets
	} else {
		rec["text"] = g.text(n)
	}
	if g.rng.IntN(100) < 15 {
		ref := g.strongRef()
		rec["reply"] = map[string]any{"root": ref, "parent": ref}
	}
	switch r := g.rng.IntN(100); {
	case r < 12:
		var imgs []any
		for i := 0; i < 1+g.rng.IntN(2); i++ {
			imgs = append(imgs, map[string]any{
				"alt":         g.text(g.rng.IntN(40)),
				"image":       g.blob("image/jpeg"),
				"aspectRatio": map[string]any{"width": int64(400 + g.rng.IntN(1600)), "height": int64(300 + g.rng.IntN(1200))},
			})
		}
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.images", "images": imgs}
	case r < 18:
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.record", "record": g.strongRef()}
	case r < 21:
		rec["embed"] = map[string]any{"$type": "app.bsky.embed.external", "external": map[string]any{
			"uri":         "https://example.com/" + g.word(),
			"title":       g.text(10 + g.rng.IntN(40)),
			"description": g.text(g.rng.IntN(80)),
		}}
	}
	return rec
}
