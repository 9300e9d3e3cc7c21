package ident

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/identity"

	"github.com/backstream/backstream/internal/cputime"
)

// plainDoc is a did:plc document as the PLC directory serves it.
const plainDoc = `{"@context":["https://www.w3.org/ns/did/v1","https://w3id.org/security/multikey/v1",` +
	`"https://w3id.org/security/suites/secp256k1-2019/v1"],"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz",` +
	`"alsoKnownAs":["at://atproto.com"],"verificationMethod":[{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz#atproto",` +
	`"type":"Multikey","controller":"did:plc:ewvi7nxzyoun6zhxrhs64oiz",` +
	`"publicKeyMultibase":"zQ3shunBKsXixLxKtC5qeSG9E4J5RkGN57im31pcTzbNQnm5w"}],` +
	`"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://enoki.us-east.host.bsky.network"}]}`

// docCases are documents of the plain shape and of every way out of it:
// other members, nulls, numbers, escapes, other bytes, names that match a
// field only without case, repeated fields, nested values, broken JSON.
func docCases() []string {
	r := strings.NewReplacer
	cases := []string{
		plainDoc,
		" \n\t" + plainDoc + "\r\n ",
		`{}`, `{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz"}`, `[]`, `null`, `""`, ``, `{`, `{"id"}`, `{"id":}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","alsoKnownAs":[],"verificationMethod":[],"service":[]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","alsoKnownAs":null}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","alsoKnownAs":[null]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","alsoKnownAs":"at://x"}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","verificationMethod":[{}]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","verificationMethod":[{"publicKeyJwk":{"kty":"EC"}}]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","service":[{"serviceEndpoint":{"uri":"https://x"}}]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","service":[{"serviceEndpoint":["https://x"]}]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","extra":1}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","extra":true}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","extra":{"a":"b"}}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","extra":["a",["b"]]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","extra":"a","extra":"b"}`,
		`{"id":null}`, `{"id":5}`, `{"id":"not a did"}`, `{"id":""}`, `{"id":"did:web:example.com"}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz"}x`, `{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz"}{}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz",}`, `{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz","alsoKnownAs":["a",]}`,
		`{"id":"did:plc:ewvi7nxzyoun6zhxrhs64oiz" "alsoKnownAs":[]}`,
	}
	variants := []*strings.Replacer{
		r(`"id":"did`, `"ID":"did`), r(`"id":"did`, `"Id":"did`), r(`"alsoKnownAs"`, `"alsoknownas"`),
		r(`"service"`, `"Service"`), r(`"type"`, `"TYPE"`), r(`"publicKeyMultibase"`, `"publickeymultibase"`),
		r(`"serviceEndpoint"`, `"serviceendpoint"`), r(`"controller"`, `"controllER"`),
		r(`"id":"did`, `"id":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","id":"did`),
		r(`"service":`, `"service":[],"service":`), r(`"type":"Multikey"`, `"type":"Multikey","type":"X"`),
		r(`"type":"Multikey"`, `"type":"Multi\u006bey"`), r(`atproto.com`, `atproto\/com`), r(`atproto.com`, `atpr\"oto`),
		r(`atproto.com`, "atpr\u00e9to"), r(`atproto.com`, "atpr\xffoto"), r(`atproto.com`, "atpr\toto"),
		r(`"id":`, `"i\u0064":`), r(`"service"`, "\"\u017fervice\""), r(`"alsoKnownAs"`, "\"alsoKnownA\u017f\""),
		r(`,`, ` , `), r(`:`, " :\n"), r(`[`, `[ `), r(`}`, ` }`),
		r(`"https://w3id.org/security/multikey/v1"`, `1`), r(`"@context":[`, `"@context":[[],`),
		r(`"#atproto_pds"`, `null`), r(`"Multikey"`, `7`), r(`"at://atproto.com"`, `"at://a","at://b"`),
		r(`#atproto"`, `"`), r(`"controller":"did:plc:ewvi7nxzyoun6zhxrhs64oiz"`, `"controller":"did:plc:other"`),
	}
	for _, v := range variants {
		cases = append(cases, v.Replace(plainDoc))
	}
	for i := 0; i < len(plainDoc); i += 37 {
		cases = append(cases, plainDoc[:i])
	}
	return cases
}

// checkDocument fails unless decodeDocument gives b encoding/json's
// verdict and document (reflect.DeepEqual: nil and empty slices apart), and
// the Identity indigo parses from it; it reports whether the scanner took
// b (plain shape).
func checkDocument(t *testing.T, b []byte) (plain bool) {
	t.Helper()
	var want identity.DIDDocument
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeDocument(b)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: decodeDocument error %v, encoding/json error %v", b, err, wantErr)
	}
	if err != nil {
		return false
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded\n%#v\nencoding/json\n%#v", b, got, want)
	}
	if gi, wi := identity.ParseIdentity(&got), identity.ParseIdentity(&want); !reflect.DeepEqual(gi, wi) {
		t.Fatalf("%q: identities differ: %#v, want %#v", b, gi, wi)
	}
	_, plain = scanDocument(b)
	return plain
}

// TestDecodeDocumentMatchesEncodingJSON: every case gets encoding/json's
// verdict and document, and the plain ones are read by the scanner (the
// directory's own document among them).
func TestDecodeDocumentMatchesEncodingJSON(t *testing.T) {
	plain := 0
	for _, c := range docCases() {
		if checkDocument(t, []byte(c)) {
			plain++
		}
	}
	if !checkDocument(t, []byte(plainDoc)) {
		t.Error("the directory's document is not read by the scanner")
	}
	if plain < 12 {
		t.Errorf("%d cases read by the scanner: too few to compare", plain)
	}
}

// FuzzDecodeDocument: any bytes get encoding/json's verdict and document.
func FuzzDecodeDocument(f *testing.F) {
	for _, c := range docCases() {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDocument(t, b) })
}

// TestDecodeDocumentCopiesOnlyWhatItKeeps: decoding the directory's
// document allocates the strings the document keeps and its slices, not
// its member names or the values it passes over ("@context"): 12
// allocations (27 when every string read was copied).
func TestDecodeDocumentCopiesOnlyWhatItKeeps(t *testing.T) {
	doc := []byte(plainDoc)
	n := testing.AllocsPerRun(100, func() {
		if _, err := decodeDocument(doc); err != nil {
			t.Fatal(err)
		}
	})
	if n > 12 {
		t.Fatalf("decoding the directory's document: %v allocations, want at most 12", n)
	}
}

// BenchmarkDecodeDocument: the directory's document by encoding/json and
// by decodeDocument.
func BenchmarkDecodeDocument(b *testing.B) {
	doc := []byte(plainDoc)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := cputime.Process(b)
		for b.Loop() {
			var d identity.DIDDocument
			if err := json.Unmarshal(doc, &d); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
	})
	b.Run("decodeDocument", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := cputime.Process(b)
		for b.Loop() {
			if _, err := decodeDocument(doc); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
	})
}

// TestFetchPLCMatchesIndigo: over a directory answering each status and
// document, fetchPLC gives indigo's LookupDID's outcome: the same error
// kind (not found, resolution failed, other) or the same Identity.
func TestFetchPLCMatchesIndigo(t *testing.T) {
	const did = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
	type answer struct {
		status int
		body   string
	}
	answers := []answer{{404, "no"}, {500, "boom"}, {410, ""}, {302, ""}, {200, `{"id":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}`},
		{200, strings.Repeat(" ", MaxDocumentBytes+1)}}
	for _, c := range docCases() {
		answers = append(answers, answer{200, c})
	}
	var cur answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if (req.URL.Path != "/"+did && req.URL.Path != "/elsewhere") || req.Header.Get("User-Agent") != "backstream" {
			t.Errorf("request %s with User-Agent %q", req.URL.Path, req.Header.Get("User-Agent"))
		}
		if cur.status == 302 && req.URL.Path == "/"+did {
			http.Redirect(w, req, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(cur.status)
		io.WriteString(w, cur.body)
	}))
	defer srv.Close()
	r := New(Config{PLC: srv.URL})
	defer r.Close()
	kind := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, identity.ErrDIDNotFound):
			return "not found"
		case errors.Is(err, identity.ErrDIDResolutionFailed):
			return "failed"
		case errors.Is(err, ErrDocumentTooLarge):
			return "too large"
		}
		return "other"
	}
	ctx := context.Background()
	for _, a := range answers {
		cur = a
		want, wantErr := r.dir.LookupDID(ctx, did)
		got, err := r.fetchPLC(ctx, did)
		if kind(err) != kind(wantErr) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%d %q: fetchPLC %v (%v), indigo %v (%v)", a.status, a.body, got, err, want, wantErr)
		}
	}
}
