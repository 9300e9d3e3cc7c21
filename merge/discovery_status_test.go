package merge

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// TestDiscoveryBoundsAccountStatus (M8): a relay listing an inactive
// account with a status longer than a repo state may store is upstream
// trouble, not a writer refusal: discovery records that account (its status
// cut to a bound) and the rest of the page, and returns nil.
func TestDiscoveryBoundsAccountStatus(t *testing.T) {
	const long, plain = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	status := strings.Repeat("x", 2000)
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/xrpc/com.atproto.sync.listRepos" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"repos": []map[string]any{
			{"did": long, "head": "bafy", "rev": "3l", "active": false, "status": status},
			{"did": plain, "head": "bafy", "rev": "3l", "active": true},
		}})
	}))
	defer relay.Close()
	client, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	r := newRig(t)
	store, w := r.store, r.w
	if err := Discover(t.Context(), Config{Store: store, Writer: w, Source: client, Logger: quiet}); err != nil {
		t.Fatalf("a long account status failed discovery: %v", err)
	}
	for _, did := range []string{long, plain} {
		st, err := store.RepoState(did)
		if err != nil || st.Status != archive.StatusFailed || st.Refetch != archive.RefetchDiscovered {
			t.Fatalf("%s not recorded as a discovered candidate: %+v, %v", did, st, err)
		}
	}
	if st, _ := store.RepoState(long); st.Active || st.AccountStatus == "" || len(st.AccountStatus) > 64 {
		t.Fatalf("inactive account recorded with active %v and a %d-byte status", st.Active, len(st.AccountStatus))
	}
}
