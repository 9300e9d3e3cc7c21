package subscribe

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
)

// TestStatusPageInBrowser renders /status in headless Chromium (Debian's
// chromium package) and checks the DOM it built: the phase, the progress bar
// at the bootstrap's fraction, the per-status table. Without Chromium it
// skips, and fails under .ci/run (internal/citest).
func TestStatusPageInBrowser(t *testing.T) {
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		citest.Need(t, "no Chromium installed (apt-get install chromium)")
	}
	status := func() any {
		return map[string]any{
			"phase":     "bootstrap",
			"repos":     map[string]any{"complete": 30, "failed": 2, "not_started": 68, "total": 100},
			"bootstrap": map[string]any{"done": 32, "known": 100, "repos_per_sec": 12.5, "eta_seconds": 6},
			"archive":   map[string]any{"tip_seq": 12345},
		}
	}
	h := newHarness(t, harnessOpts{notReady: true, status: status})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", h.url("/status")).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	if shot := os.Getenv("STATUS_SCREENSHOT"); shot != "" {
		// Manual check: STATUS_SCREENSHOT=/tmp/status.png go test -run TestStatusPageInBrowser
		_ = exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=900,900", "--screenshot="+shot, h.url("/status")).Run()
	}
	for _, want := range []string{`id="phase">bootstrap<`, `id="progress" style="width:32.00%"`, `<td>complete</td><td>30</td>`, `32 of 100 repos terminal`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %s:\n%s", want, dom)
		}
	}
}
