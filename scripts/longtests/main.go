// Command longtests lists the tests that `make test` leaves out: those that
// call citest.Long, which skips them under -short. For each package with
// such tests it prints one line, the package's directory (./ relative to
// the module root) and a `go test -run` pattern naming exactly them:
//
//	./oracle/crash ^(TestSoakPlateau|TestSubscribeSurvivesSIGKILL)$
//
// `make test-skipped` runs each line's tests in full; CI runs it after
// `make test`, so a heavy test is skipped by the quick tier, never by CI.
// It also refuses a test that skips whole under -short by other means
// (`if testing.Short() { t.Skip(…) }`): such a test would be run by neither.
//
// Usage, from the repository root: go run ./scripts/longtests
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	pkgs, err := scan(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "longtests:", err)
		os.Exit(1)
	}
	for _, dir := range sortedKeys(pkgs) {
		fmt.Printf("./%s ^(%s)$\n", filepath.ToSlash(dir), strings.Join(pkgs[dir], "|"))
	}
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
