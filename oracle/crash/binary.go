package crash

// binary.go owns building the backstream binary once per test binary.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/backstream/backstream/internal/citest"
)

// build is the one package-level cache: the binary is built at most once per
// test binary, whatever test asks first.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary builds github.com/backstream/backstream/cmd/backstream once per
// test binary, with the build tag `crashpoint` (a release build has no crash
// points and refuses BACKSTREAM_CRASHPOINT), and returns its path. The build
// runs in the test's working directory, which is inside the module.
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "backstream-crash-bin-")
		if err != nil {
			build.err = fmt.Errorf("crash: build: %w", err)
			return
		}
		build.dir = dir
		build.path = filepath.Join(dir, "backstream")
		out, err := exec.Command("go", "build", "-tags", "crashpoint", "-o", build.path, "github.com/backstream/backstream/cmd/backstream").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("crash: go build: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// BuildCommit builds cmd/backstream as it was at commit of this
// repository's git history, a release build as an operator ran it (no
// crash points), and returns its path (in a temp dir of t). The tree is
// extracted with `git archive` into a temp dir, so the caller's work tree
// and .git are only read; the build uses the same go (GOTOOLCHAIN=local).
// Without git or a git history here (a source tarball) it skips outside CI
// and fails in CI (citest.Need); a commit the history lacks, or a failed
// build, fails the test.
func BuildCommit(t testing.TB, commit string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		citest.Need(t, fmt.Sprintf("building commit %s needs git and this repository's history (git rev-parse: %v)", commit, err))
	}
	repo := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("crash: commit %s is not in the git history of %s (a shallow clone? git fetch --unshallow): %v %s", commit, repo, err, out)
	}
	src := t.TempDir()
	if err := extractCommit(repo, commit, src); err != nil {
		t.Fatalf("crash: extract commit %s: %v", commit, err)
	}
	bin := filepath.Join(t.TempDir(), "backstream-"+commit)
	cmd := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./cmd/backstream")
	cmd.Dir, cmd.Env = src, append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crash: the build of commit %s failed: %v\n%s", commit, err, out)
	}
	return bin
}

// extractCommit writes the tree of commit into dir: `git archive` piped
// into `tar -x`.
func extractCommit(repo, commit, dir string) error {
	gitArchive := exec.Command("git", "-C", repo, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	var gitErr, tarErr bytes.Buffer
	gitArchive.Stderr, untar.Stderr = &gitErr, &tarErr
	var err error
	if untar.Stdin, err = gitArchive.StdoutPipe(); err != nil {
		return err
	}
	if err := untar.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	aerr := gitArchive.Run()
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar -x: %w %s", err, tarErr.Bytes())
	}
	if aerr != nil {
		return fmt.Errorf("git archive: %w %s", aerr, gitErr.Bytes())
	}
	return nil
}

// Main runs the tests of m and removes the built binary afterwards; call it
// from TestMain: `func TestMain(m *testing.M) { os.Exit(crash.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	return code
}
