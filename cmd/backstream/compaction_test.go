package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
)

// setKey writes one raw key into the store of dir (a state only a crash or
// a corruption leaves: the test's way to make it).
func setKey(t *testing.T, dir string, key, value []byte) {
	t.Helper()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Set(key, value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func statusCompactionOf(t *testing.T, dir string) statusCompaction {
	t.Helper()
	code, out, stderr := runCLI(t, nil, "status", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	var r struct {
		Compaction *statusCompaction `json:"compaction"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Compaction == nil {
		t.Fatalf("%v: no compaction section in %s", err, out)
	}
	return *r.Compaction
}

// TestCompactionReset: a malformed intent shows in `backstream status` as a
// halted compaction naming the key (not as a failed report); `backstream
// compaction reset` refuses while another holder has the store's lock and
// leaves the intent; without one it deletes the intent, keeps the
// watermark, and status is clean again; a malformed watermark it deletes. Breaking the lock check (opening
// read-only, which takes no lock) lets the reset run under a live holder
// and fails.
func TestCompactionReset(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	w, _ := archive.EncodeWatermark(1)
	setKey(t, dir, archive.KeyCompaction, w)
	setKey(t, dir, archive.KeyCompactIntent, []byte{0x01, 0xff})
	c := statusCompactionOf(t, dir)
	if !c.Halted || !strings.Contains(c.HaltReason, string(archive.KeyCompactIntent)) {
		t.Fatalf("status with a malformed intent: %+v, want halted naming %s", c, archive.KeyCompactIntent)
	}

	holder, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code == 0 || !strings.Contains(stderr, "held open by another process") {
		t.Fatalf("reset under a holder: exit %d, %s", code, stderr)
	}
	if _, closer, err := holder.DB().Get(archive.KeyCompactIntent); err != nil {
		t.Fatalf("the intent is gone after a refused reset: %v", err)
	} else {
		closer.Close()
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "deleted the compaction intent") {
		t.Fatalf("reset: exit %d, %s %s", code, out, stderr)
	}
	c = statusCompactionOf(t, dir)
	if c.Halted || c.Intent != nil || c.Watermark != 1 || c.LagSeqs != 2 {
		t.Fatalf("status after the reset: %+v, want watermark 1, 2 seqs behind, no intent", c)
	}
	code, out, _ = runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "no compaction intent; the watermark stays at 1") {
		t.Fatalf("a second reset: exit %d, %s", code, out)
	}
	// A malformed watermark halts compaction too, naming this command as
	// the recovery: the reset drops it (absent is 0).
	setKey(t, dir, archive.KeyCompaction, []byte{0x01, 0x02})
	// Its lag is counted from watermark 0, as serve's /status counts it and
	// where the pass after the reset starts: not "0 seqs behind".
	if c = statusCompactionOf(t, dir); !c.Halted || c.Watermark != 0 || c.LagSeqs != 2 {
		t.Fatalf("status of a malformed watermark: %+v, want halted, watermark 0, 2 seqs behind", c)
	}
	// No intent is left (the reset above deleted it): the answer says
	// what it deleted, not an intent there was none of.
	code, out, stderr = runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "deleted the malformed watermark (there was no compaction intent)") {
		t.Fatalf("reset of a malformed watermark: exit %d, %s %s", code, out, stderr)
	}
	// Both: the answer names both.
	setKey(t, dir, archive.KeyCompaction, []byte{0x01, 0x02})
	setKey(t, dir, archive.KeyCompactIntent, []byte{0x01, 0xff})
	code, out, stderr = runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "deleted the compaction intent and the malformed watermark") {
		t.Fatalf("reset of a malformed watermark and an intent: exit %d, %s %s", code, out, stderr)
	}
	if c = statusCompactionOf(t, dir); c.Halted || c.Watermark != 0 {
		t.Fatalf("status after resetting a malformed watermark: %+v, want not halted, watermark 0", c)
	}
}

// TestCompactionResetNeedsStore: `compaction reset` on a data dir that
// holds no store (missing, or an empty directory) refuses with "no store
// here" and creates nothing, as status and checkpoint do. Opening
// read-write directly instead creates a fresh store and reports success.
func TestCompactionResetNeedsStore(t *testing.T) {
	base := t.TempDir()
	missing := filepath.Join(base, "missing")
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{missing, empty} {
		code, out, stderr := runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
		if code != 1 || !strings.Contains(stderr, "no store here") {
			t.Fatalf("reset of %s: exit %d, %s %s", dir, code, out, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, archive.StoreDir)); !os.IsNotExist(err) {
			t.Fatalf("a refused reset created %s/%s: %v", dir, archive.StoreDir, err)
		}
	}
}

// TestCompactionResetReindex: a malformed index marker (meta/index or
// meta/index_replay) shows as a halted compaction, with the reset that
// repairs it (--reindex for meta/index, which the plain reset repairs too);
// the reset drops that
// index and marks every row unindexed, so status shows its backfill
// pending, not a halt, and the replay index's backfill then ends matching
// ev/. --reindex drops the compaction index with a well-formed marker too
// (a malformed rec/ or tomb/ entry is found only by a pass).
func TestCompactionResetReindex(t *testing.T) {
	for _, tc := range []struct {
		key      []byte
		index    func(c statusCompaction) *node.IndexBackfillStatus
		recovery string // what status names
	}{
		{archive.KeyIndex, func(c statusCompaction) *node.IndexBackfillStatus { return c.Index }, "compaction reset --reindex --data-dir"},
		{archive.KeyReplayIndex, func(c statusCompaction) *node.IndexBackfillStatus { return c.ReplayIndex }, "compaction reset --data-dir"},
	} {
		t.Run(string(tc.key), func(t *testing.T) {
			dir := t.TempDir()
			seedStore(t, dir)
			setKey(t, dir, tc.key, []byte{0x01, 0x02})
			if c := statusCompactionOf(t, dir); !c.Halted || !strings.Contains(c.HaltReason, string(tc.key)) || !strings.Contains(c.HaltRecovery, tc.recovery) {
				t.Fatalf("status with a malformed %s: %+v, want halted naming it, the recovery %q", tc.key, c, tc.recovery)
			}
			code, out, stderr := runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
			if code != 0 || !strings.Contains(out, "the next start rebuilds it from rows 1 to 2") {
				t.Fatalf("reset: exit %d, %s %s", code, out, stderr)
			}
			c := statusCompactionOf(t, dir)
			if m := tc.index(c); c.Halted || m == nil || m.Next != 1 || m.End != 3 {
				t.Fatalf("status after the reset: %+v (index %+v), want not halted, rows 1 to 2 to index", c, m)
			}
			s, err := archive.Open(dir, archive.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.FillReplayIndex(context.Background(), 0, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.CheckReplayIndex(); err != nil {
				t.Fatal(err)
			}
		})
	}
	dir := t.TempDir()
	seedStore(t, dir)
	code, out, stderr := runCLI(t, nil, "compaction", "reset", "--data-dir", dir)
	if code != 0 || strings.Contains(out, "dropped") {
		t.Fatalf("reset of a sound store: exit %d, %s %s, want nothing dropped", code, out, stderr)
	}
	code, out, stderr = runCLI(t, nil, "compaction", "reset", "--reindex", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "dropped the compaction index; the next start rebuilds it from rows 1 to 2") {
		t.Fatalf("reset --reindex: exit %d, %s %s", code, out, stderr)
	}
	if c := statusCompactionOf(t, dir); c.Halted || c.Index == nil || c.Index.Next != 1 || c.Index.End != 3 {
		t.Fatalf("status after reset --reindex: %+v (index %+v), want rows 1 to 2 to index", c, c.Index)
	}
}
