package ident_test

import (
	"context"
	"crypto/elliptic"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ethereum/go-ethereum/crypto/secp256k1"
	"github.com/mr-tron/base58"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
)

// docServer is a PLC directory and handle host on one server: GET /<did>
// answers the document set for the DID, and /.well-known/atproto-did (the
// resolver's Web sends it here, naming the handle in Host) the DID set for
// the handle.
type docServer struct {
	mu      sync.Mutex
	docs    map[string]string // did -> document
	handles map[string]string // lower-case handle -> did
}

func newDocServer(t *testing.T) (*docServer, string) {
	s := &docServer{docs: map[string]string{}, handles: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if req.URL.Path == "/.well-known/atproto-did" {
			if did, ok := s.handles[strings.ToLower(req.Host)]; ok {
				fmt.Fprint(w, did)
				return
			}
			w.WriteHeader(http.StatusNotFound)
			return
		}
		key := strings.TrimPrefix(req.URL.Path, "/")
		if req.URL.Path == "/.well-known/did.json" {
			key = "did:web:" + strings.ToLower(req.Host)
		}
		doc, ok := s.docs[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprint(w, doc)
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *docServer) set(did, doc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[did] = doc
}

func (s *docServer) setHandle(handle, did string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handles[handle] = did
}

// variantKey is a key pair of either curve and the ways a document writes
// its public half.
type variantKey struct {
	priv  atcrypto.PrivateKey
	pub   atcrypto.PublicKey
	order *big.Int // the curve's group order, for the high-S form
	// legacyType is the key's pre-Multikey verification method type,
	// whose publicKeyMultibase is the uncompressed point without a
	// multicodec prefix.
	legacyType string
}

func newVariantKey(t *testing.T, p256 bool) variantKey {
	t.Helper()
	k := variantKey{order: secp256k1.S256().Params().N, legacyType: "EcdsaSecp256k1VerificationKey2019"}
	var err error
	if p256 {
		k.order, k.legacyType = elliptic.P256().Params().N, "EcdsaSecp256r1VerificationKey2019"
		k.priv, err = atcrypto.GeneratePrivateKeyP256()
	} else {
		k.priv, err = atcrypto.GeneratePrivateKeyK256()
	}
	if err != nil {
		t.Fatal(err)
	}
	if k.pub, err = k.priv.PublicKey(); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k variantKey) legacyMultibase() string { return "z" + base58.Encode(k.pub.UncompressedBytes()) }

// highS is c with its signature's other valid form (s replaced by n - s),
// which atproto refuses for both curves.
func (k variantKey) highS(c *repo.Commit) *repo.Commit {
	s := new(big.Int).SetBytes(c.Sig[32:])
	if s.Cmp(new(big.Int).Rsh(k.order, 1)) > 0 {
		panic("the signature is already high-S")
	}
	out := *c
	out.Sig = append(append([]byte{}, c.Sig[:32]...), new(big.Int).Sub(k.order, s).FillBytes(make([]byte, 32))...)
	return &out
}

// variantDoc writes a did:plc document with the parts a variant changes.
type variantDoc struct {
	vmID, vmType, key string // the atproto verification method
	svcID, endpoint   string // the atproto_pds service
	aka               string // the alsoKnownAs array's members
}

func (v variantDoc) render(did string) string {
	return fmt.Sprintf(`{"@context":["https://www.w3.org/ns/did/v1"],"id":%q,"alsoKnownAs":[%s],`+
		`"verificationMethod":[{"id":%q,"type":%q,"controller":%q,"publicKeyMultibase":%q}],`+
		`"service":[{"id":%q,"type":"AtprotoPersonalDataServer","serviceEndpoint":%q}]}`,
		did, v.aka, strings.ReplaceAll(v.vmID, "<did>", did), v.vmType, did, v.key,
		strings.ReplaceAll(v.svcID, "<did>", did), v.endpoint)
}

// TestDocumentVariants: the forms real documents take, from the PLC
// directory's older renderings, other implementations and did:web hosts,
// each resolved to the key that verifies the account's commits (from
// memory, and from ident/ after a restart), the PDS that has authority
// over its repositories and the handle it declares: a verification method
// named #atproto or <did>#atproto; a Multikey of either curve (zQ3s…
// K-256, zDn… P-256) or the older EcdsaSecp256k1VerificationKey2019 /
// EcdsaSecp256r1VerificationKey2019 with an uncompressed point; a service
// named #atproto_pds or <did>#atproto_pds whose endpoint has a trailing
// slash, a path, an upper-case host; alsoKnownAs with other URIs first, an
// invalid handle first, a handle in upper case. A commit whose signature
// is in its high-S form is refused for both curves, as atproto requires.
func TestDocumentVariants(t *testing.T) {
	const aka = `"at://alice.example.com"`
	type variant struct {
		name string
		p256 bool
		doc  func(k variantKey) variantDoc
	}
	modern := func(k variantKey) variantDoc {
		return variantDoc{vmID: "<did>#atproto", vmType: "Multikey", key: k.pub.Multibase(),
			svcID: "#atproto_pds", endpoint: "https://pds.example.com", aka: aka}
	}
	with := func(edit func(*variantDoc, variantKey)) func(variantKey) variantDoc {
		return func(k variantKey) variantDoc {
			d := modern(k)
			edit(&d, k)
			return d
		}
	}
	none := func(*variantDoc, variantKey) {}
	legacy := func(d *variantDoc, k variantKey) { d.vmType, d.key = k.legacyType, k.legacyMultibase() }
	var variants []variant
	for _, p256 := range []bool{false, true} {
		curve := map[bool]string{false: "K-256 ", true: "P-256 "}[p256]
		for _, v := range []struct {
			name string
			edit func(*variantDoc, variantKey)
		}{
			{"multikey", none},
			{"multikey, #atproto", func(d *variantDoc, _ variantKey) { d.vmID = "#atproto" }},
			{"legacy type", legacy},
			{"legacy type, #atproto", func(d *variantDoc, k variantKey) { legacy(d, k); d.vmID = "#atproto" }},
		} {
			variants = append(variants, variant{curve + v.name, p256, with(v.edit)})
		}
	}
	for _, v := range []struct {
		name string
		edit func(*variantDoc, variantKey)
	}{
		{"service <did>#atproto_pds", func(d *variantDoc, _ variantKey) { d.svcID = "<did>#atproto_pds" }},
		{"endpoint with a trailing slash", func(d *variantDoc, _ variantKey) { d.endpoint = "https://pds.example.com/" }},
		{"endpoint with a path", func(d *variantDoc, _ variantKey) { d.endpoint = "https://pds.example.com/pds/" }},
		{"endpoint in upper case", func(d *variantDoc, _ variantKey) { d.endpoint = "HTTPS://PDS.Example.COM" }},
		{"other aliases first", func(d *variantDoc, _ variantKey) {
			d.aka = `"https://alice.example.com","did:web:alice.example.com",` + aka + `,"at://bob.example.com"`
		}},
		{"an invalid handle first", func(d *variantDoc, _ variantKey) { d.aka = `"at://not_a_handle","at://",` + aka }},
		{"handle in upper case", func(d *variantDoc, _ variantKey) { d.aka = `"at://Alice.EXAMPLE.com"` }},
	} {
		variants = append(variants, variant{v.name, false, with(v.edit)})
	}

	srv, url := newDocServer(t)
	st := &memStore{m: map[string]archive.Ident{}}
	newResolver := func() *ident.Resolver {
		return ident.New(ident.Config{PLC: url, Web: url, Store: st, Persist: st.persist, Sleep: noSleep})
	}
	r := newResolver()
	defer r.Close()
	ctx := context.Background()
	type account struct {
		variant
		did string
		key variantKey
	}
	var accounts []account
	for i, v := range variants {
		a := account{variant: v, did: fmt.Sprintf("did:plc:%024d", i), key: newVariantKey(t, v.p256)}
		srv.set(a.did, v.doc(a.key).render(a.did))
		accounts = append(accounts, a)
	}
	srv.setHandle("alice.example.com", accounts[len(accounts)-1].did)
	for _, a := range accounts {
		c := stubCommit(t, a.did, a.key.priv)
		info, err := r.VerifyCommit(ctx, a.did, c)
		if err != nil {
			t.Errorf("%s: %v", a.name, err)
			continue
		}
		if err := ident.CheckAuthority(info, "pds.example.com"); err != nil {
			t.Errorf("%s: repositories from the document's own PDS: %v", a.name, err)
		}
		if _, err := r.Verify(ctx, info, true, a.key.highS(c)); !errors.Is(err, ident.ErrBadSignature) {
			t.Errorf("%s: a high-S signature: %v, want ErrBadSignature", a.name, err)
		}
	}
	// The last account's handle verifies both ways, whatever its case.
	last := accounts[len(accounts)-1]
	for _, h := range []string{"alice.example.com", "ALICE.example.com"} {
		if verdict, result, err := r.CheckIdentity(ctx, last.did, h); err != nil || result != ident.HandleOK || verdict != "alice.example.com" {
			t.Errorf("%s: #identity naming %s: %q %q %v", last.name, h, verdict, result, err)
		}
	}
	for _, a := range accounts[len(accounts)-3 : len(accounts)-1] {
		srv.setHandle("alice.example.com", a.did)
		if verdict, result, err := r.CheckIdentity(ctx, a.did, "alice.example.com"); err != nil || result != ident.HandleOK {
			t.Errorf("%s: #identity naming its handle: %q %q %v", a.name, verdict, result, err)
		}
	}

	// After a restart, from ident/ alone (the directory gone).
	r.Close()
	srv.mu.Lock()
	srv.docs = map[string]string{}
	srv.mu.Unlock()
	again := newResolver()
	defer again.Close()
	for _, a := range accounts {
		if _, err := again.VerifyCommit(ctx, a.did, stubCommit(t, a.did, a.key.priv)); err != nil {
			t.Errorf("%s, read back from ident/: %v", a.name, err)
		}
	}
}

// TestPDSServiceSelection: which service of a DID document is the PDS, as
// atproto specifies: the first entry whose id ends in #atproto_pds (the
// relative #atproto_pds or the full <did>#atproto_pds) and whose type is
// AtprotoPersonalDataServer, its endpoint an http or https URL with a
// host. Entries of other ids or types are passed over; when the first
// matching entry's endpoint is not such a URL, the document names no PDS
// (only the relay then has authority over the account's repositories).
// Each document is resolved as a did:plc and as a did:web.
func TestPDSServiceSelection(t *testing.T) {
	svc := func(id, typ, endpoint string) string {
		return fmt.Sprintf(`{"id":%q,"type":%q,"serviceEndpoint":%q}`, id, typ, endpoint)
	}
	const pdsType, pds, other = "AtprotoPersonalDataServer", "https://pds.example.com", "https://other.example.com"
	cases := []struct {
		name     string
		services []string
		want     string
	}{
		{"relative id", []string{svc("#atproto_pds", pdsType, pds)}, pds},
		{"full id", []string{svc("<did>#atproto_pds", pdsType, pds)}, pds},
		{"a labeler first", []string{svc("#atproto_labeler", "AtprotoLabeler", other), svc("#atproto_pds", pdsType, pds)}, pds},
		{"wrong type only", []string{svc("#atproto_pds", "AtprotoLabeler", other)}, ""},
		{"wrong type first", []string{svc("#atproto_pds", "AtprotoLabeler", other), svc("<did>#atproto_pds", pdsType, pds)}, pds},
		{"the first of two", []string{svc("#atproto_pds", pdsType, pds), svc("<did>#atproto_pds", pdsType, other)}, pds},
		{"id without a fragment", []string{svc("atproto_pds", pdsType, other), svc("#atproto_pds", pdsType, pds)}, pds},
		{"another fragment", []string{svc("#atproto_pds2", pdsType, other), svc("#atproto_pds", pdsType, pds)}, pds},
		{"http endpoint", []string{svc("#atproto_pds", pdsType, "http://pds.example.com:2583")}, "http://pds.example.com:2583"},
		{"wss endpoint", []string{svc("#atproto_pds", pdsType, "wss://pds.example.com")}, ""},
		{"endpoint without a scheme", []string{svc("#atproto_pds", pdsType, "pds.example.com")}, ""},
		{"endpoint without a host", []string{svc("#atproto_pds", pdsType, "https:///xrpc")}, ""},
		{"no service", nil, ""},
	}
	srv, url := newDocServer(t)
	r := ident.New(ident.Config{PLC: url, Web: url, Sleep: noSleep})
	defer r.Close()
	k := newVariantKey(t, false)
	for i, c := range cases {
		for _, did := range []string{fmt.Sprintf("did:plc:%024d", i), fmt.Sprintf("did:web:pds%d.example.com", i)} {
			services := strings.ReplaceAll(strings.Join(c.services, ","), "<did>", did)
			srv.set(did, fmt.Sprintf(`{"@context":["https://www.w3.org/ns/did/v1"],"id":%q,"alsoKnownAs":[],`+
				`"verificationMethod":[{"id":"%s#atproto","type":"Multikey","controller":%q,"publicKeyMultibase":%q}],"service":[%s]}`,
				did, did, did, k.pub.Multibase(), services))
			info, _, err := r.Lookup(context.Background(), did)
			if err != nil {
				t.Errorf("%s (%s): %v", c.name, did, err)
				continue
			}
			if info.PDS != c.want {
				t.Errorf("%s (%s): PDS %q, want %q", c.name, did, info.PDS, c.want)
			}
		}
	}
}
