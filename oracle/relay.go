package oracle

// relay.go owns the relay listener's HTTP endpoints: listRepos, getRepo
// (redirect), getRepoStatus, listHosts, DID documents, /_devnet/status.

import (
	"encoding/base64"
	"encoding/json"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/backstream/backstream/oracle/world"
)

// listRepos limits.
const (
	listReposDefaultLimit = 500
	listReposMaxLimit     = 1000
)

func (n *Network) relayMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /xrpc/com.atproto.sync.listRepos", n.handleRelayListRepos)
	mux.HandleFunc("GET /xrpc/com.atproto.sync.getRepo", n.handleRelayGetRepo)
	mux.HandleFunc("GET /xrpc/com.atproto.sync.getRepoStatus", n.handleGetRepoStatus)
	mux.HandleFunc("GET /xrpc/com.atproto.sync.listHosts", n.handleListHosts)
	mux.HandleFunc("GET /xrpc/com.atproto.sync.subscribeRepos", n.handleSubscribe)
	mux.HandleFunc("GET /xrpc/_health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "backstream-oracle"})
	})
	mux.HandleFunc("GET /_devnet/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, n.Status())
	})
	mux.HandleFunc("GET /export", n.handleExport)
	mux.HandleFunc("GET /{did}", n.handleDIDDoc)
	mux.HandleFunc("GET /.well-known/did.json", n.handleWebDIDDoc)
	mux.HandleFunc("GET /.well-known/atproto-did", n.handleAtprotoDID)
	mux.HandleFunc("/xrpc/{method}", func(w http.ResponseWriter, r *http.Request) {
		writeXRPCError(w, http.StatusNotImplemented, "MethodNotImplemented", "method not implemented: "+r.PathValue("method"))
	})
	return mux
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// xrpcError is the atproto error body.
type xrpcError struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

func writeXRPCError(w http.ResponseWriter, status int, name, msg string) {
	writeJSON(w, status, xrpcError{Error: name, Message: msg})
}

// pageRequest is a parsed listRepos request.
type pageRequest struct {
	after string // DID the page starts after; "" = first page
	raw   string // the cursor as sent
	limit int
}

// parsePage parses limit and cursor; it answers the 400 itself on error.
func parsePage(w http.ResponseWriter, r *http.Request) (pageRequest, bool) {
	q := r.URL.Query()
	p := pageRequest{limit: listReposDefaultLimit, raw: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > listReposMaxLimit {
			writeXRPCError(w, http.StatusBadRequest, "InvalidRequest",
				"limit must be an integer between 1 and 1000")
			return p, false
		}
		p.limit = l
	}
	if p.raw != "" {
		did, ok := decodeCursor(p.raw)
		if !ok {
			writeXRPCError(w, http.StatusBadRequest, "InvalidRequest", "malformed cursor")
			return p, false
		}
		p.after = did
	}
	return p, true
}

// cursorPad separates the encoded DID from LongCursor padding.
const cursorPad = "~"

// encodeCursor makes the opaque cursor for "after did", padded to size bytes
// when size is larger than the natural cursor.
func encodeCursor(did string, size int) string {
	c := base64.RawURLEncoding.EncodeToString([]byte(did))
	if size > len(c)+1 {
		c += cursorPad + strings.Repeat("A", size-len(c)-1)
	}
	return c
}

func decodeCursor(c string) (string, bool) {
	if i := strings.Index(c, cursorPad); i >= 0 {
		c = c[:i]
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", false
	}
	if _, err := syntax.ParseDID(string(b)); err != nil {
		return "", false
	}
	return string(b), true
}

// page returns the accounts after p.after (sorted by DID) that pass keep, at
// most p.limit, and whether more remain.
func page(accts []world.Account, p pageRequest, keep func(world.Account) bool) ([]world.Account, bool) {
	i := sort.Search(len(accts), func(i int) bool { return accts[i].DID > p.after })
	var out []world.Account
	for ; i < len(accts); i++ {
		if !keep(accts[i]) {
			continue
		}
		if len(out) == p.limit {
			return out, true
		}
		out = append(out, accts[i])
	}
	return out, false
}

// RelayIndexOmits says whether the relay's listRepos leaves did out
// (Config.RelayIndexMissing): a fixed hash of the DID against the fraction,
// so the same accounts are missing on every page and every run.
func (n *Network) RelayIndexOmits(did string) bool {
	f := n.cfg.RelayIndexMissing
	if f <= 0 {
		return false
	}
	h := fnv.New64a()
	h.Write([]byte(did))
	return float64(h.Sum64()%1_000_000) < f*1_000_000
}

// listed says whether listRepos shows an account: a deleted account has no
// repo any more and disappears from enumeration, as on a real PDS; every other
// status is listed with active=false and its status.
func listed(a world.Account) bool { return a.Status != world.StatusDeleted }

// listReposOutput renders a page.
func listReposOutput(accts []world.Account, cursor string) comatproto.SyncListRepos_Output {
	out := comatproto.SyncListRepos_Output{Repos: make([]*comatproto.SyncListRepos_Repo, 0, len(accts))}
	for _, a := range accts {
		active := a.Active
		r := &comatproto.SyncListRepos_Repo{Did: a.DID, Rev: a.Rev, Active: &active}
		if a.Head.Defined() {
			r.Head = a.Head.String()
		}
		if !a.Active && a.Status != "" {
			st := a.Status
			r.Status = &st
		}
		out.Repos = append(out.Repos, r)
	}
	if cursor != "" {
		out.Cursor = &cursor
	}
	return out
}

func (n *Network) handleRelayListRepos(w http.ResponseWriter, r *http.Request) {
	p, ok := parsePage(w, r)
	if !ok {
		return
	}
	accts, more := page(n.w.Accounts(), p, func(a world.Account) bool {
		return listed(a) && !n.RelayIndexOmits(a.DID)
	})
	var cursor string
	if more && len(accts) > 0 {
		cursor = encodeCursor(accts[len(accts)-1].DID, n.faults.longCursorSize())
	}
	if p.raw != "" && n.faults.take(FaultListReposLoop) {
		cursor = p.raw // the page repeats its own cursor
	}
	if p.raw != "" {
		if shape, ok := n.faults.takeListShape(); ok {
			writeHostileListRepos(w, shape, listReposOutput(accts, cursor))
			return
		}
	}
	writeJSON(w, http.StatusOK, listReposOutput(accts, cursor))
}

// Sizes of the hostile listRepos shapes: past the client's 64 KiB cursor and
// 32 MiB page caps.
const (
	hugeCursorBytes = 10 << 20
	hugeBodyBytes   = 33 << 20
)

// writeHostileListRepos answers a listRepos page with a hostile shape built
// around the page it would have served.
func writeHostileListRepos(w http.ResponseWriter, shape FaultKind, out comatproto.SyncListRepos_Output) {
	w.Header().Set("Content-Type", "application/json")
	switch shape {
	case FaultListReposHugeCursor:
		c := strings.Repeat("A", hugeCursorBytes)
		out.Cursor = &c
		writeJSON(w, http.StatusOK, out)
	case FaultListReposHugeBody:
		// Valid JSON as far as it goes: a cursor that never ends within
		// the cap, streamed so the oracle never holds 33 MiB.
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"repos":[],"cursor":"`)
		chunk := []byte(strings.Repeat("A", 64<<10))
		for sent := 0; sent < hugeBodyBytes; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return // the client stopped reading at its cap
			}
		}
		_, _ = io.WriteString(w, `"}`)
	case FaultListReposMalformed:
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>\n")
	case FaultListReposWrongTypes:
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"cursor":42,"repos":{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}}`)
	case FaultListReposTruncated:
		b, _ := json.Marshal(out)
		b = b[:len(b)/2]
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}

// parseDIDParam reads and checks the did query parameter; it answers the 400 itself.
func parseDIDParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	did := r.URL.Query().Get("did")
	if did == "" {
		writeXRPCError(w, http.StatusBadRequest, "InvalidRequest", "missing did parameter")
		return "", false
	}
	if _, err := syntax.ParseDID(did); err != nil {
		writeXRPCError(w, http.StatusBadRequest, "InvalidRequest", "invalid did: "+err.Error())
		return "", false
	}
	return did, true
}

// handleRelayGetRepo redirects to the account's PDS host.
func (n *Network) handleRelayGetRepo(w http.ResponseWriter, r *http.Request) {
	did, ok := parseDIDParam(w, r)
	if !ok {
		return
	}
	acct, ok := n.w.Account(did)
	if !ok || acct.Host < 0 || acct.Host >= len(n.hosts) {
		writeXRPCError(w, http.StatusBadRequest, "RepoNotFound", "repo not found: "+did)
		return
	}
	n.repos.relayHit(did)
	if len(n.hosts) > 1 && n.faults.misattributed(did) {
		other := n.hosts[(acct.Host+1)%len(n.hosts)]
		http.Redirect(w, r, other.url+"/xrpc/com.atproto.sync.getRepo?"+r.URL.RawQuery, http.StatusFound)
		return
	}
	if target, ok := n.faults.redirect(did); ok {
		http.Redirect(w, r, target, http.StatusFound)
		return
	}
	http.Redirect(w, r, n.hosts[acct.Host].url+"/xrpc/com.atproto.sync.getRepo?"+r.URL.RawQuery, http.StatusFound)
}

// handleGetRepoStatus serves com.atproto.sync.getRepoStatus.
func (n *Network) handleGetRepoStatus(w http.ResponseWriter, r *http.Request) {
	did, ok := parseDIDParam(w, r)
	if !ok {
		return
	}
	acct, ok := n.w.Account(did)
	if !ok {
		writeXRPCError(w, http.StatusBadRequest, "RepoNotFound", "repo not found: "+did)
		return
	}
	out := comatproto.SyncGetRepoStatus_Output{Did: did, Active: acct.Active}
	if !acct.Active && acct.Status != "" {
		st := acct.Status
		out.Status = &st
	}
	if acct.Rev != "" {
		rev := acct.Rev
		out.Rev = &rev
	}
	writeJSON(w, http.StatusOK, out)
}

// handleListHosts serves com.atproto.sync.listHosts: every PDS host, one
// page (but those HideHost leaves out; GrowHost's accounts counted; the
// status SetHostStatus gives; no accountCount under OmitAccountCounts), or
// FailListHosts's error while it holds.
func (n *Network) handleListHosts(w http.ResponseWriter, r *http.Request) {
	if st := n.faults.takeListHostsFailure(); st != 0 {
		writeXRPCError(w, st, errorName(st), "injected fault")
		return
	}
	counts := make([]int64, len(n.hosts))
	for _, a := range n.w.Accounts() {
		if a.Host >= 0 && a.Host < len(counts) && a.Status != world.StatusDeleted {
			counts[a.Host]++
		}
	}
	seq := n.log.headSeq()
	out := comatproto.SyncListHosts_Output{Hosts: make([]*comatproto.SyncListHosts_Host, 0, len(n.hosts))}
	for i, h := range n.hosts {
		if n.faults.hostHidden(i) {
			continue
		}
		c, s := counts[i]+n.faults.grownBy(i), seq
		status, counted := n.faults.rosterEntry(i)
		e := &comatproto.SyncListHosts_Host{Hostname: h.hostname(), Seq: &s, Status: &status}
		if counted {
			e.AccountCount = &c
		}
		out.Hosts = append(out.Hosts, e)
	}
	writeJSON(w, http.StatusOK, out)
}

// spelledEndpoint is endpoint (http://host:port) in another spelling of
// the same host (FaultDIDSpelledPDS): HTTP://host.:port/.
func spelledEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	return strings.ToUpper(u.Scheme) + "://" + net.JoinHostPort(u.Hostname()+".", u.Port()) + "/"
}

// foreignKeyMultibase is world.ForeignKey's public key, what FaultDIDWrongKey
// documents name.
func foreignKeyMultibase() string {
	pub, err := world.ForeignKey().PublicKey()
	if err != nil {
		panic(err) // a valid K256 key always has a public key
	}
	return pub.Multibase()
}

// didDocument is a DID document as a PLC directory serves it.
type didDocument struct {
	Context            []string             `json:"@context"`
	ID                 string               `json:"id"`
	AlsoKnownAs        []string             `json:"alsoKnownAs"`
	VerificationMethod []verificationMethod `json:"verificationMethod"`
	Service            []didService         `json:"service"`
}

type verificationMethod struct {
	ID                 string `json:"id"`
	Type               string `json:"type"`
	Controller         string `json:"controller"`
	PublicKeyMultibase string `json:"publicKeyMultibase"`
}

type didService struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	ServiceEndpoint string `json:"serviceEndpoint"`
}

// handleDIDDoc serves GET /<did> like plc.directory: 404 for unknown DIDs,
// tombstoned ones (RetiredDIDs) and anything but a did:plc.
func (n *Network) handleDIDDoc(w http.ResponseWriter, r *http.Request) {
	did, err := url.PathUnescape(r.PathValue("did"))
	if err != nil || !strings.HasPrefix(did, "did:plc:") {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "not found"})
		return
	}
	n.stats.docRequests.Add(1)
	n.faults.fabricatedDoc(did)
	if n.checkRetired(w, did) {
		return
	}
	n.serveDIDDoc(w, r, did)
}

// serveDIDDoc serves did's document (PLC or did:web), 404 for unknown DIDs,
// with the document faults applied.
func (n *Network) serveDIDDoc(w http.ResponseWriter, r *http.Request, did string) {
	acct, ok := n.w.Account(did)
	if !ok || acct.Host < 0 || acct.Host >= len(n.hosts) {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "DID not registered: " + did})
		return
	}
	delay, fault := n.faults.nextDoc(did)
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-n.ctx.Done():
			return
		}
	}
	switch fault {
	case FaultPLCFailing:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "injected fault"})
		return
	case FaultDIDNotFound:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "DID not registered: " + did})
		return
	case FaultDIDWrongKey:
		acct.PublicKeyMultibase = foreignKeyMultibase()
	}
	doc := didDocument{
		Context: []string{
			"https://www.w3.org/ns/did/v1",
			"https://w3id.org/security/multikey/v1",
			"https://w3id.org/security/suites/secp256k1-2019/v1",
		},
		ID:          did,
		AlsoKnownAs: []string{"at://" + n.faults.declaredHandle(did, acct.Handle)},
		VerificationMethod: []verificationMethod{{
			ID: did + "#atproto", Type: "Multikey", Controller: did, PublicKeyMultibase: acct.PublicKeyMultibase,
		}},
		Service: []didService{{
			ID: "#atproto_pds", Type: "AtprotoPersonalDataServer", ServiceEndpoint: n.hosts[acct.Host].url,
		}},
	}
	switch fault {
	case FaultDIDNoKey:
		doc.VerificationMethod = []verificationMethod{}
	case FaultDIDSpelledPDS:
		doc.Service[0].ServiceEndpoint = spelledEndpoint(n.hosts[acct.Host].url)
	}
	w.Header().Set("Content-Type", "application/did+ld+json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(doc)
}
