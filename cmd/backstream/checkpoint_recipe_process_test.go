package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/oracle"
)

// TestPeriodicCheckpointRecipe runs the backup script of docs/operating.md
// ("Periodic checkpoints"), as written there, against a real serve: each
// run writes one checkpoint into a dated directory under --backup-dir, and
// once there are more than KEEP complete ones the older ones go, a crash's
// leftover store.partial older than the oldest kept with them. A run with
// a BACKUP_DIR that is not serve's fails and prunes nothing.
func TestPeriodicCheckpointRecipe(t *testing.T) {
	citest.Long(t, "process-level test of the documented backup script")
	script := recipeScript(t)
	bin := buildBinary(t)
	binDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(binDir, "backstream")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 20, RecordsMean: 5, Hosts: 2, Rate: 50, Traffic: oracle.TrafficBasic, Seed: 43})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	backup, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(backup, "2000-01-01T000000Z", "store.partial")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, bin, network.RelayURL(), t.TempDir(),
		append(followArgs(network), "--capture-wait", "2s", "--backup-dir", backup, "--checkpoint-interval", "0s")...)
	waitSteady(t, p, 2*time.Minute)

	var last int64
	run := func(backupDir string) (string, error) {
		// The script names a checkpoint by the second: each run's must
		// differ from the last one's.
		for last != 0 && time.Now().Unix() == last {
			time.Sleep(20 * time.Millisecond)
		}
		defer func() { last = time.Now().Unix() }()
		cmd := exec.Command("bash", script)
		cmd.Env = append(procenv.Clean(), "PATH="+binDir+":"+os.Getenv("PATH"),
			"ADMIN="+p.admin, "BACKUP_DIR="+backupDir, "KEEP=2")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	var names []string
	for i := range 3 {
		if out, err := run(backup); err != nil {
			t.Fatalf("run %d of the script: %v\n%s", i+1, err, out)
		}
		names = append(names, dated(t, backup)...)
	}
	got := dated(t, backup)
	want := slices.Compact(slices.Sorted(slices.Values(names)))
	if len(want) < 2 {
		t.Fatalf("checkpoints seen %v: want the 3 runs' own", want)
	}
	want = want[len(want)-2:]
	if !slices.Equal(got, want) {
		t.Fatalf("after 3 runs with KEEP=2 the backup dir holds %v, want the newest two %v (the first and the crash's leftover pruned)", got, want)
	}
	for _, n := range got {
		if _, err := os.Stat(filepath.Join(backup, n, "store", "CURRENT")); err != nil {
			t.Errorf("checkpoint %s: %v; want a whole store", n, err)
		}
	}

	if out, err := run(t.TempDir()); err == nil || !strings.Contains(out, "is BACKUP_DIR serve's --backup-dir?") {
		t.Fatalf("a run whose BACKUP_DIR is not serve's: %v\n%s; want it failed naming BACKUP_DIR", err, out)
	}
	if after := dated(t, backup); len(after) != 3 || !slices.Equal(after[:2], want) {
		// That run's checkpoint went to serve's --backup-dir; nothing is
		// pruned there.
		t.Fatalf("after the failed run the backup dir holds %v, want %v and that run's own checkpoint, nothing pruned", after, want)
	}
}

// recipeScript writes the backup script docs/operating.md gives to a file
// and returns its path.
func recipeScript(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	const start = "```bash\n#!/bin/bash\n# /usr/local/bin/backstream-backup"
	_, body, ok := strings.Cut(string(doc), start)
	if !ok {
		t.Fatal("docs/operating.md has no backup script (a bash block starting #!/bin/bash, # /usr/local/bin/backstream-backup)")
	}
	body, _, ok = strings.Cut(body, "\n```")
	if !ok {
		t.Fatal("docs/operating.md: the backup script's block does not end")
	}
	path := filepath.Join(t.TempDir(), "backstream-backup")
	if err := os.WriteFile(path, []byte("#!/bin/bash\n# backstream-backup"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// dated lists the dated directories under dir, sorted.
func dated(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "????-??-??T??????Z"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range m {
		names = append(names, filepath.Base(p))
	}
	slices.Sort(names)
	return names
}
