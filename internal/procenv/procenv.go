package procenv

import (
	"os"
	"strings"
)

// Clean is this process's environment without BACKSTREAM_* variables, plus
// extra.
func Clean(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BACKSTREAM_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
