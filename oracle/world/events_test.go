package world

import (
	"bytes"
	"context"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/repo"
)

// TestEvents_CBORRoundTrip: every event body survives cbor-gen encoding (as
// the firehose server sends it) and the decoded #commit still verifies.
func TestEvents_CBORRoundTrip(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, Config{Seed: 8, Accounts: 20, RecordsMean: 10, Hosts: 1})
	dir := mockDirectory(t, w)
	tr := w.NewTraffic(TrafficFull, 8)
	seen := map[string]int{}
	for i := 0; i < 600; i++ {
		ev, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		seen[ev.Type()]++
		var buf bytes.Buffer
		switch {
		case ev.Commit != nil:
			if err := ev.Commit.MarshalCBOR(&buf); err != nil {
				t.Fatal(err)
			}
			var got comatproto.SyncSubscribeRepos_Commit
			if err := got.UnmarshalCBOR(bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatalf("step %d: decode commit: %v", i, err)
			}
			if _, err := repo.VerifyCommitMessage(ctx, &got); err != nil {
				t.Fatalf("step %d: decoded commit: %v", i, err)
			}
			if got.Since == nil || got.PrevData == nil {
				t.Fatalf("step %d: decoded commit lost since/prevData", i)
			}
		case ev.Sync != nil:
			if err := ev.Sync.MarshalCBOR(&buf); err != nil {
				t.Fatal(err)
			}
			var got comatproto.SyncSubscribeRepos_Sync
			if err := got.UnmarshalCBOR(bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatal(err)
			}
			if _, err := repo.VerifySyncMessage(ctx, dir, &got); err != nil {
				t.Fatalf("step %d: decoded sync: %v", i, err)
			}
		case ev.Identity != nil:
			if err := ev.Identity.MarshalCBOR(&buf); err != nil {
				t.Fatal(err)
			}
			var got comatproto.SyncSubscribeRepos_Identity
			if err := got.UnmarshalCBOR(bytes.NewReader(buf.Bytes())); err != nil || *got.Handle != *ev.Identity.Handle {
				t.Fatalf("step %d: identity: %v", i, err)
			}
		case ev.Account != nil:
			if err := ev.Account.MarshalCBOR(&buf); err != nil {
				t.Fatal(err)
			}
			var got comatproto.SyncSubscribeRepos_Account
			if err := got.UnmarshalCBOR(bytes.NewReader(buf.Bytes())); err != nil || got.Active != ev.Account.Active {
				t.Fatalf("step %d: account: %v", i, err)
			}
		}
	}
	t.Logf("%v", seen)
}
