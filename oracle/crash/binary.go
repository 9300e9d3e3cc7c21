package crash

// binary.go owns building the backstream binary once per test binary.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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

// Main runs the tests of m and removes the built binary afterwards; call it
// from TestMain: `func TestMain(m *testing.M) { os.Exit(crash.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	return code
}
