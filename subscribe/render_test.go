package subscribe

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/render")

const (
	testDID    = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	testTimeUS = int64(1730801472345678) // 2024-11-05T10:11:12.345678Z
)

// renderEvents are the golden events: one or more per kind, records built by
// indigo with real CIDs.
func renderEvents(tb testing.TB) map[string]*archive.Event {
	tb.Helper()
	post := mustCBOR(tb, map[string]any{
		"$type": "app.bsky.feed.post", "text": "golden <post> & \"quotes\" 😀", "createdAt": "2024-11-05T10:11:12.345Z",
		"langs": []any{"en"},
		"embed": map[string]any{"$type": "app.bsky.embed.images", "images": []any{
			map[string]any{"alt": "a cat", "image": imageBlob(1, "image/jpeg"), "aspectRatio": map[string]any{"width": int64(4), "height": int64(3)}},
		}},
		"reply": map[string]any{"root": strongRef(1), "parent": strongRef(2)},
	})
	profile := mustCBOR(tb, map[string]any{
		"$type": "app.bsky.actor.profile", "displayName": "Alice", "description": "hi\nthere",
		"avatar": imageBlob(7, "image/png"),
	})
	cidOf := func(b []byte) []byte {
		c, err := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(b)
		if err != nil {
			tb.Fatal(err)
		}
		return c.Bytes()
	}
	base := func(seq uint64, k archive.Kind) *archive.Event {
		return &archive.Event{Seq: seq, Kind: k, DID: testDID, TimeUS: testTimeUS + int64(seq), UpstreamSeq: 9000 + int64(seq), Source: archive.SourceLive}
	}
	create := base(1, archive.KindCreate)
	create.Collection, create.RKey, create.Rev = "app.bsky.feed.post", "3l3qo2vutsw2b", "3l3qo2vuz3k2c"
	create.Record, create.CID = post, cidOf(post)

	update := base(2, archive.KindUpdate)
	update.Collection, update.RKey, update.Rev = "app.bsky.actor.profile", "self", "3l3qo2vuz3k2d"
	update.Record, update.CID = profile, cidOf(profile)

	del := base(3, archive.KindDelete)
	del.Collection, del.RKey, del.Rev = "app.bsky.feed.post", "3l3qo2vutsw2b", "3l3qo2vuz3k2e"

	ident := base(4, archive.KindIdentity)
	ident.Handle = "alice.test"
	identNoHandle := base(5, archive.KindIdentity)

	active := base(6, archive.KindAccount)
	active.Active = true
	takendown := base(7, archive.KindAccount)
	takendown.Status = "takendown"

	sync := base(8, archive.KindSync)
	sync.Rev = "3l3qo2vuz3k2f"

	return map[string]*archive.Event{
		"commit-create": create, "commit-update": update, "commit-delete": del,
		"identity": ident, "identity-no-handle": identNoHandle,
		"account-active": active, "account-takendown": takendown,
		"sync": sync,
	}
}

// jetstreamEvent mirrors Jetstream's models.Event (pkg/models/models.go),
// with backstream's sync extension, so encoding/json gives the shape
// Jetstream sends.
type jetstreamEvent struct {
	Did      string                                  `json:"did"`
	TimeUS   int64                                   `json:"time_us"`
	Kind     string                                  `json:"kind,omitempty"`
	Commit   *jetstreamCommit                        `json:"commit,omitempty"`
	Account  *comatproto.SyncSubscribeRepos_Account  `json:"account,omitempty"`
	Identity *comatproto.SyncSubscribeRepos_Identity `json:"identity,omitempty"`
	Sync     *comatproto.SyncSubscribeRepos_Sync     `json:"sync,omitempty"`
}

type jetstreamCommit struct {
	Rev        string          `json:"rev,omitempty"`
	Operation  string          `json:"operation,omitempty"`
	Collection string          `json:"collection,omitempty"`
	RKey       string          `json:"rkey,omitempty"`
	Record     json.RawMessage `json:"record,omitempty"`
	CID        string          `json:"cid,omitempty"`
}

// jetstreamJSON builds the expected JSON independently of the renderer: the
// Jetstream structs filled from ev, encoded by encoding/json.
func jetstreamJSON(tb testing.TB, ev *archive.Event) []byte {
	tb.Helper()
	t := appendTime(nil, ev.TimeUS)
	js := jetstreamEvent{Did: ev.DID, TimeUS: ev.TimeUS}
	switch ev.Kind {
	case archive.KindCreate, archive.KindUpdate, archive.KindDelete:
		js.Kind = "commit"
		js.Commit = &jetstreamCommit{Rev: ev.Rev, Operation: ev.Kind.String(), Collection: ev.Collection, RKey: ev.RKey}
		if ev.Kind != archive.KindDelete {
			rec, err := AppendRecordJSONReference(nil, ev.Record)
			if err != nil {
				tb.Fatal(err)
			}
			c, err := cid.Cast(ev.CID)
			if err != nil {
				tb.Fatal(err)
			}
			js.Commit.Record, js.Commit.CID = rec, c.String()
		}
	case archive.KindIdentity:
		js.Kind = "identity"
		js.Identity = &comatproto.SyncSubscribeRepos_Identity{Did: ev.DID, Seq: ev.UpstreamSeq, Time: string(t)}
		if ev.Handle != "" {
			js.Identity.Handle = &ev.Handle
		}
	case archive.KindAccount:
		js.Kind = "account"
		js.Account = &comatproto.SyncSubscribeRepos_Account{Active: ev.Active, Did: ev.DID, Seq: ev.UpstreamSeq, Time: string(t)}
		if ev.Status != "" {
			js.Account.Status = &ev.Status
		}
	case archive.KindSync:
		js.Kind = "sync"
		js.Sync = &comatproto.SyncSubscribeRepos_Sync{Did: ev.DID, Rev: ev.Rev, Seq: ev.UpstreamSeq, Time: string(t)}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(js); err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestRenderGolden(t *testing.T) {
	events := renderEvents(t)
	for _, name := range sortedKeys(events) {
		ev := events[name]
		t.Run(name, func(t *testing.T) {
			got, err := AppendJSON(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "render", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(append([]byte(nil), got...), '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, bytes.TrimSuffix(want, []byte("\n"))) {
				t.Errorf("golden mismatch\n got: %s\nwant: %s", got, want)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON: %s", got)
			}
			// Same bytes as Jetstream's own model structs through encoding/json:
			// key order, names and omitempty all match.
			if js := jetstreamJSON(t, ev); !bytes.Equal(got, js) {
				t.Errorf("differs from Jetstream's model\n got: %s\nwant: %s", got, js)
			}
			checkDecoded(t, ev, got)
			// The reference renderer gives the same bytes.
			ref, err := (&Renderer{Reference: true}).AppendJSON(nil, ev)
			if err != nil || !bytes.Equal(ref, got) {
				t.Errorf("reference renderer: %s (%v)", ref, err)
			}
		})
	}
}

// checkDecoded unmarshals the rendered JSON and checks every field against
// the event; the record must round-trip through atdata to the exact CBOR.
func checkDecoded(t *testing.T, ev *archive.Event, b []byte) {
	t.Helper()
	var js jetstreamEvent
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&js); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if js.Did != ev.DID || js.TimeUS != ev.TimeUS {
		t.Errorf("did/time_us = %q/%d", js.Did, js.TimeUS)
	}
	wantTime := appendTime(nil, ev.TimeUS)
	switch ev.Kind {
	case archive.KindCreate, archive.KindUpdate, archive.KindDelete:
		c := js.Commit
		if js.Kind != "commit" || c == nil || c.Rev != ev.Rev || c.Operation != ev.Kind.String() || c.Collection != ev.Collection || c.RKey != ev.RKey {
			t.Fatalf("commit = %+v", c)
		}
		if ev.Kind == archive.KindDelete {
			if c.Record != nil || c.CID != "" {
				t.Errorf("delete carries record/cid: %+v", c)
			}
			return
		}
		m, err := atdata.UnmarshalJSON(c.Record)
		if err != nil {
			t.Fatalf("record JSON: %v", err)
		}
		back, err := atdata.MarshalCBOR(m)
		if err != nil || !bytes.Equal(back, ev.Record) {
			t.Errorf("record does not round-trip to its CBOR (%v)", err)
		}
		parsed, err := cid.Decode(c.CID)
		if err != nil || !bytes.Equal(parsed.Bytes(), ev.CID) {
			t.Errorf("cid %q does not parse back (%v)", c.CID, err)
		}
	case archive.KindIdentity:
		want := &comatproto.SyncSubscribeRepos_Identity{Did: ev.DID, Seq: ev.UpstreamSeq, Time: string(wantTime)}
		if ev.Handle != "" {
			want.Handle = &ev.Handle
		}
		if js.Kind != "identity" || !reflect.DeepEqual(js.Identity, want) {
			t.Errorf("identity = %+v", js.Identity)
		}
	case archive.KindAccount:
		want := &comatproto.SyncSubscribeRepos_Account{Active: ev.Active, Did: ev.DID, Seq: ev.UpstreamSeq, Time: string(wantTime)}
		if ev.Status != "" {
			want.Status = &ev.Status
		}
		if js.Kind != "account" || !reflect.DeepEqual(js.Account, want) {
			t.Errorf("account = %+v", js.Account)
		}
	case archive.KindSync:
		want := &comatproto.SyncSubscribeRepos_Sync{Did: ev.DID, Rev: ev.Rev, Seq: ev.UpstreamSeq, Time: string(wantTime)}
		if js.Kind != "sync" || !reflect.DeepEqual(js.Sync, want) {
			t.Errorf("sync = %+v", js.Sync)
		}
	}
}

func TestRenderTime(t *testing.T) {
	if got := string(appendTime(nil, testTimeUS)); got != "2024-11-05T10:11:12.345678Z" {
		t.Errorf("time = %s", got)
	}
	if got := string(appendTime(nil, 0)); got != "1970-01-01T00:00:00.000000Z" {
		t.Errorf("time(0) = %s", got)
	}
}

func TestRenderCursor(t *testing.T) {
	ev := renderEvents(t)["sync"]
	r := &Renderer{Cursor: true}
	got, err := r.AppendJSON(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","time_us":1730801472345686,"cursor":8,"kind":"sync","sync":{"did":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","rev":"3l3qo2vuz3k2f","seq":9008,"time":"2024-11-05T10:11:12.345686Z"}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	events := renderEvents(t)
	withKind := func(k archive.Kind) *archive.Event { e := *events["sync"]; e.Kind = k; return &e }
	badCID := *events["commit-create"]
	badCID.CID = []byte{0x01, 0x71, 0x12, 0x20, 0x00} // digest shorter than its length
	noCID := *events["commit-create"]
	noCID.CID = nil
	badRec := *events["commit-create"]
	badRec.Record = []byte{0xa1, 0x61, 0x61, 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0} // {"a": 1.5}
	noRec := *events["commit-update"]
	noRec.Record = nil
	cases := map[string]struct {
		ev   *archive.Event
		want error
	}{
		"kind-0":     {withKind(0), ErrUnknownKind},
		"kind-7":     {withKind(7), ErrUnknownKind},
		"bad-cid":    {&badCID, ErrBadCID},
		"no-cid":     {&noCID, ErrBadCID},
		"bad-record": {&badRec, ErrBadRecord},
		"no-record":  {&noRec, ErrBadRecord},
	}
	for name, c := range cases {
		for _, ref := range []bool{false, true} {
			prefix := []byte("[prefix]")
			got, err := (&Renderer{Reference: ref}).AppendJSON(append([]byte(nil), prefix...), c.ev)
			if !errors.Is(err, c.want) {
				t.Errorf("%s (reference %v): err = %v, want %v", name, ref, err, c.want)
			}
			if !bytes.Equal(got, prefix) {
				t.Errorf("%s: dst not restored on error: %q", name, got)
			}
		}
	}
}

// A warm Renderer renders a typical commit without allocating.
func TestRenderDoesNotAllocate(t *testing.T) {
	events := renderEvents(t)
	var r Renderer
	buf := make([]byte, 0, 64<<10)
	for _, name := range sortedKeys(events) {
		ev := events[name]
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := r.AppendJSON(buf[:0], ev); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocs per render", name, allocs)
		}
	}
}
