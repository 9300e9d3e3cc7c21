package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMutantsApply: every mutant's Old text stands exactly once in its
// file, as the tool requires. A refactor that moves or reindents the code
// a mutant breaks makes it STALE, and the mutation run then proves nothing
// about it; this test says so in make test, not at the next mutation run.
func TestMutantsApply(t *testing.T) {
	ids := map[string]bool{}
	for _, m := range mutants {
		if ids[m.ID] {
			t.Errorf("%s: the id is used twice", m.ID)
		}
		ids[m.ID] = true
		b, err := os.ReadFile(filepath.Join("..", "..", m.File))
		if err != nil {
			t.Errorf("%s: %v", m.ID, err)
			continue
		}
		if n := strings.Count(string(b), m.Old); n != 1 {
			t.Errorf("%s: its Old text stands %d times in %s, want once (stale: update it with the code it breaks)", m.ID, n, m.File)
		}
		if len(m.Tests) == 0 {
			t.Errorf("%s: no test command", m.ID)
		}
	}
}
