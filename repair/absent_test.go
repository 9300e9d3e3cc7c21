package repair

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

const (
	didGone     = "did:plc:gggggggggggggggggggggggg" // the relay says deleted
	didHostGone = "did:plc:hhhhhhhhhhhhhhhhhhhhhhhh" // the relay does not know it, its host neither
	didNoHost   = "did:plc:nnnnnnnnnnnnnnnnnnnnnnnn" // the relay does not know it, no host to ask
	didAlive    = "did:plc:llllllllllllllllllllllll" // the relay does not know it, its host says active at a newer rev
	didAliveOld = "did:plc:oooooooooooooooooooooooo" // the relay says active at the archived rev
	didNoAnswer = "did:plc:eeeeeeeeeeeeeeeeeeeeeeee" // the relay fails
)

// statusServer serves getRepoStatus from answers (did -> status code and
// body), counting requests.
func statusServer(t *testing.T, answers map[string]string, asked *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		did := r.URL.Query().Get("did")
		a, ok := answers[did]
		switch {
		case !ok || a == "404":
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"RepoNotFound","message":"repo not found"}`))
		case a == "500":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.Write([]byte(`{"did":"` + did + `",` + a + `}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAbsentAccounts: after a complete pass, each active account no
// listing named (here: every account but one) is asked with getRepoStatus:
// the relay's "deleted" and a host's RepoNotFound (when the relay does not
// know the account either) are archived as account rows that erase it, a
// host's "active" at a newer rev marks it for a replacement, and an account the relay
// does not know with no host to ask, or one nobody answers for, is left as
// it is, and so is one active at the archived rev (an account the relay's
// index misses is not fetched again). A listed account is never asked. With
// more absent accounts than MaxAbsent, none is asked.
func TestAbsentAccounts(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	var relayAsked, hostAsked atomic.Int64
	relay := statusServer(t, map[string]string{didGone: `"active":false,"status":"deleted"`, didNoAnswer: "500",
		didAliveOld: `"active":true,"rev":"` + revNew + `"`}, &relayAsked)
	host := statusServer(t, map[string]string{didAlive: `"active":true,"rev":"3kcccccccccc2"`}, &hostAsked)
	hostName := strings.TrimPrefix(host.URL, "http://")
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: []string{hostName}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for did, h := range map[string]string{didSame: "", didGone: "", didHostGone: hostName, didNoHost: "", didAlive: hostName, didNoAnswer: hostName, didAliveOld: ""} {
		apply(setRepo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew, Host: h}))
	}
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: time.Now().UnixMicro()})
	apply(&archive.Unit{Puts: []archive.KV{gap}})

	src := &listing{repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}
	r, err := New(Config{Store: s, Writer: w, Source: src, Status: c, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	for did, want := range map[string]string{didGone: "deleted", didHostGone: "deleted"} {
		if st, _ := s.RepoState(did); st.Active || st.AccountStatus != want {
			t.Errorf("%s: %+v, want inactive, %s", did, st, want)
		}
	}
	if st, _ := s.RepoState(didAlive); !st.Active || st.Refetch != archive.RefetchAudit {
		t.Errorf("absent but active at its host: %+v, want marked for a replacement", st)
	}
	for _, did := range []string{didNoHost, didNoAnswer, didSame, didAliveOld} {
		if st, _ := s.RepoState(did); !st.Active || st.Refetch != archive.RefetchNone {
			t.Errorf("%s: %+v, want untouched", did, st)
		}
	}
	if got := accountRows(t, s); got[didGone] != "deleted" || got[didHostGone] != "deleted" || len(got) != 2 {
		t.Errorf("account rows %v: want one deletion each for the two gone accounts", got)
	}
	if relayAsked.Load() != 6 || hostAsked.Load() != 2 {
		t.Errorf("relay asked %d times, host %d: want the 6 absent accounts, then the host for the 2 the relay does not know that have a host", relayAsked.Load(), hostAsked.Load())
	}

	// More absent accounts (4) than MaxAbsent (2): each pass asks 2, the
	// ones after those the pass before asked, so two passes ask all 4.
	var mu sync.Mutex
	var asked []string
	recording := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		asked = append(asked, req.URL.Query().Get("did"))
		mu.Unlock()
		relay.Config.Handler.ServeHTTP(w, req)
	}))
	defer recording.Close()
	c2, err := upstream.New(recording.URL, upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: []string{hostName}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r, err = New(Config{Store: s, Writer: w, Source: src, Status: c2, MaxAbsent: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var passes [][]string
	for id := uint64(2); id <= 3; id++ {
		gap, _ = archive.GapPut(archive.Gap{ID: id, Kind: archive.GapAudit, FirstSeenUS: time.Now().UnixMicro()})
		apply(&archive.Unit{Puts: []archive.KV{gap}})
		// didAlive's replacement, if the pass before marked it, is done.
		apply(setRepo(didAlive, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew, Host: hostName}))
		if err := r.step(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		passes, asked = append(passes, asked), nil
		mu.Unlock()
	}
	all := append(append([]string{}, passes[0]...), passes[1]...)
	sort.Strings(all)
	want := []string{didAlive, didAliveOld, didNoAnswer, didNoHost}
	sort.Strings(want)
	if len(passes[0]) != 2 || !slices.Equal(all, want) {
		t.Errorf("4 absent accounts over a MaxAbsent of 2: the relay was asked %v, then %v; want 2 a pass, all of %v", passes[0], passes[1], want)
	}
}

// TestAbsentInactiveAccounts: an account the archive holds deactivated,
// its records kept, that no listing of a complete pass names is asked too:
// deactivated, then deleted, with the deletion lost in a gap (listRepos
// does not list a deleted account), it gets its deleting account row, as a
// live #account would have archived. One the relay says is still
// deactivated gets no row. One the archive holds deleted or taken down has
// nothing left to erase, and one whose DID the directory does not know is
// never checked on a listing's word: neither is asked.
func TestAbsentInactiveAccounts(t *testing.T) {
	const (
		didDeactGone = "did:plc:dddddddddddddddddddddddd" // deactivated in the archive; the relay says deleted
		didDeact     = "did:plc:ssssssssssssssssssssssss" // deactivated in the archive and at the relay
		didErased    = "did:plc:tttttttttttttttttttttttt" // taken down in the archive
		didUnknown   = "did:plc:uuuuuuuuuuuuuuuuuuuuuuuu" // the directory does not know it
	)
	s, w, apply := newStore(t)
	ctx := context.Background()
	var asked atomic.Int64
	deleted := `"active":false,"status":"deleted"`
	relay := statusServer(t, map[string]string{didDeactGone: deleted, didDeact: `"active":false,"status":"deactivated"`,
		didErased: deleted, didUnknown: deleted}, &asked)
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew}))
	for did, status := range map[string]string{didDeactGone: "deactivated", didDeact: "deactivated", didErased: "takendown"} {
		apply(setRepo(did, archive.RepoState{Status: archive.StatusComplete, AccountStatus: status, BackfillRev: revNew}))
	}
	apply(setRepo(didUnknown, archive.RepoState{Status: archive.StatusUnavailable, ErrClass: archive.ClassUnknownDID}))
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: time.Now().UnixMicro()})
	apply(&archive.Unit{Puts: []archive.KV{gap}})

	src := &listing{repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}
	r, err := New(Config{Store: s, Writer: w, Source: src, Status: c, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := accountRows(t, s); got[didDeactGone] != "deleted" || len(got) != 1 {
		t.Errorf("account rows %v: want one deletion, of the deactivated account the relay says is deleted", got)
	}
	if st, _ := s.RepoState(didDeactGone); st.Active || st.AccountStatus != "deleted" {
		t.Errorf("deactivated, then deleted in a gap: %+v, want inactive, deleted", st)
	}
	if st, _ := s.RepoState(didDeact); st.Active || st.AccountStatus != "deactivated" {
		t.Errorf("still deactivated: %+v, want untouched", st)
	}
	if asked.Load() != 2 {
		t.Errorf("relay asked %d times: want the 2 deactivated accounts no listing names, not the erased one nor the unknown DID", asked.Load())
	}
}

// accountRows is the status of every account row archived, by DID.
func accountRows(t *testing.T, s *archive.Store) map[string]string {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	got := map[string]string{}
	for it.Next() {
		if ev := it.Event(); ev.Kind == archive.KindAccount {
			got[ev.DID] = ev.Status
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAbsentAccountThatMovedIsNotDeleted: with verification on, an absent
// account the relay does not know is asked of the PDS its DID document
// names, not of the host it was last downloaded from: an account that
// moved from its recorded host (which no longer holds it: RepoNotFound) to
// another PDS, active there, is not archived as deleted, and its old host
// is not asked. An account whose document still names its recorded host,
// which says not found, is deleted as before; so is one whose DID the
// directory no longer has a document for (no PDS to prefer).
func TestAbsentAccountThatMovedIsNotDeleted(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	const didMoved, didDeleted, didTombstoned = "did:plc:mmmmmmmmmmmmmmmmmmmmmmmm", "did:plc:dddddddddddddddddddddddd", "did:plc:tttttttttttttttttttttttt"
	// Its document cannot be read (the directory failing): its recorded
	// host is not asked, as the account may have moved.
	const didUnread = "did:plc:uuuuuuuuuuuuuuuuuuuuuuuu"
	var relayAsked, oldAsked, newAsked atomic.Int64
	relay := statusServer(t, map[string]string{}, &relayAsked) // knows none of them
	oldHost := statusServer(t, map[string]string{}, &oldAsked) // holds none of them any more
	newHost := statusServer(t, map[string]string{didMoved: `"active":true,"rev":"` + revNew + `"`}, &newAsked)
	oldName, newName := strings.TrimPrefix(oldHost.URL, "http://"), strings.TrimPrefix(newHost.URL, "http://")
	key, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey()
	docs := map[string]string{didMoved: newHost.URL, didDeleted: oldHost.URL}
	plc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		did := strings.TrimPrefix(r.URL.Path, "/")
		if did == didUnread {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		pds, ok := docs[did]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"id":%q,"alsoKnownAs":[],"verificationMethod":[{"id":"%s#atproto","type":"Multikey","controller":%q,"publicKeyMultibase":%q}],`+
			`"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":%q}]}`, did, did, did, pub.Multibase(), pds)
	}))
	defer plc.Close()
	id := ident.New(ident.Config{PLC: plc.URL, Mode: ident.ModeStrict, Sleep: func(context.Context, time.Duration) error { return nil }})
	defer id.Close()
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: []string{oldName, newName}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, did := range []string{didSame, didMoved, didDeleted, didTombstoned, didUnread} {
		host := oldName
		if did == didSame {
			host = ""
		}
		apply(setRepo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew, Host: host}))
	}
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: time.Now().UnixMicro()})
	apply(&archive.Unit{Puts: []archive.KV{gap}})
	src := &listing{repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}
	r, err := New(Config{Store: s, Writer: w, Source: src, Status: c, Identity: id, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.RepoState(didMoved); !st.Active || st.Refetch != archive.RefetchNone {
		t.Errorf("the account that moved to %s: %+v, want active and untouched (its old host %s no longer holds it)", newName, st, oldName)
	}
	if st, _ := s.RepoState(didUnread); !st.Active || st.AccountStatus != "" {
		t.Errorf("the account whose document could not be read: %+v, want active and untouched (left unanswered: it may have moved)", st)
	}
	for _, did := range []string{didDeleted, didTombstoned} {
		if st, _ := s.RepoState(did); st.Active || st.AccountStatus != "deleted" {
			t.Errorf("%s: %+v, want inactive, deleted", did, st)
		}
	}
	if got := accountRows(t, s); got[didMoved] != "" || len(got) != 2 {
		t.Errorf("account rows %v: want the two gone accounts' deletions only", got)
	}
	if relayAsked.Load() != 4 || oldAsked.Load() != 2 || newAsked.Load() != 1 {
		t.Errorf("asked: relay %d, old host %d, new host %d; want 4, 2 (the deleted and the tombstoned account), 1 (the moved one)",
			relayAsked.Load(), oldAsked.Load(), newAsked.Load())
	}
}
