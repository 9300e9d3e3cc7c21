package deploy

// helpers_test.go owns what the deploy tests share: the repository root, the
// backstream binary (built once per test binary) and its CLI variables.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"testing"
)

// repoRoot is the module root: this package lives in <root>/deploy.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("deploy: no go.mod above %s: %v", wd, err)
	}
	return root
}

// readFile reads a file relative to the repository root.
func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the binary built for the tests when they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// backstreamBinary builds ./cmd/backstream once per test binary.
func backstreamBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "backstream-deploy-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDir, binPath = dir, filepath.Join(dir, "backstream")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/backstream")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/backstream: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// cliVariables returns the BACKSTREAM_* variables of a subcommand, read
// from its -h output (the CLI is the source of truth).
func cliVariables(t *testing.T, subcommand string) map[string]bool {
	t.Helper()
	out, err := exec.Command(backstreamBinary(t), subcommand, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("backstream %s -h: %v\n%s", subcommand, err, out)
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[(BACKSTREAM_[A-Z0-9_]+)\]`).FindAllStringSubmatch(string(out), -1) {
		vars[m[1]] = true
	}
	if len(vars) == 0 {
		t.Fatalf("backstream %s -h lists no BACKSTREAM_* variable:\n%s", subcommand, out)
	}
	return vars
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
