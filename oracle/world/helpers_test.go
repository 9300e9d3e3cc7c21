package world

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
)

func init() {
	// repo.VerifyCommitMessage logs through slog.Default; keep test output quiet.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func mustBuild(t testing.TB, cfg Config) *World {
	t.Helper()
	w, err := Build(cfg)
	if err != nil {
		t.Fatalf("Build(%+v): %v (repro: go test ./oracle/world -run %s)", cfg, err, t.Name())
	}
	return w
}

// mockDirectory holds every account's #atproto key.
func mockDirectory(t testing.TB, w *World) *identity.MockDirectory {
	t.Helper()
	dir := identity.NewMockDirectory()
	for _, a := range w.Accounts() {
		dir.Insert(identity.Identity{
			DID:    syntax.DID(a.DID),
			Handle: syntax.Handle(a.Handle),
			Keys: map[string]identity.VerificationMethod{
				"atproto": {Type: "Multikey", PublicKeyMultibase: a.PublicKeyMultibase},
			},
		})
	}
	return dir
}

// loadedRepo is a CAR parsed by indigo's own loader.
type loadedRepo struct {
	commit  *repo.Commit
	head    cid.Cid
	records map[string]cid.Cid
	bytes   map[string][]byte
}

// loadAndVerifyCAR parses car with repo.LoadRepoFromCAR and checks it is a
// complete, well-formed repo of acct signed by its key; it returns the
// records found by walking the MST.
func loadAndVerifyCAR(car []byte, acct Account) (*loadedRepo, error) {
	ctx := context.Background()
	commit, r, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(car))
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	_, head, err := repo.LoadCommitFromCAR(ctx, bytes.NewReader(car))
	if err != nil {
		return nil, fmt.Errorf("load commit: %w", err)
	}
	if commit.DID != acct.DID {
		return nil, fmt.Errorf("commit DID %s, want %s", commit.DID, acct.DID)
	}
	pub, err := atcrypto.ParsePublicMultibase(acct.PublicKeyMultibase)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	if err := commit.VerifySignature(pub); err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	if r.MST.IsPartial() {
		return nil, fmt.Errorf("MST is partial")
	}
	if err := r.MST.Verify(); err != nil {
		return nil, fmt.Errorf("MST verify: %w", err)
	}
	out := &loadedRepo{commit: commit, head: *head, records: map[string]cid.Cid{}, bytes: map[string][]byte{}}
	err = r.MST.Walk(func(k []byte, v cid.Cid) error {
		nsid, rkey, err := syntax.ParseRepoPath(string(k))
		if err != nil {
			return err
		}
		b, c, err := r.GetRecordBytes(ctx, nsid, rkey)
		if err != nil {
			return fmt.Errorf("record %s: %w", k, err)
		}
		if *c != v {
			return fmt.Errorf("record %s: cid %s, walk %s", k, c, v)
		}
		out.records[string(k)] = v
		out.bytes[string(k)] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func diffRecords(got, want map[string]cid.Cid) string {
	var b bytes.Buffer
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if n < 5 {
				fmt.Fprintf(&b, "  %s: got %v want %v\n", k, got[k], v)
			}
			n++
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			if n < 5 {
				fmt.Fprintf(&b, "  %s: extra %v\n", k, v)
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d differences (got %d, want %d):\n%s", n, len(got), len(want), b.String())
}
