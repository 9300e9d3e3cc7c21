package deploy

// promtool_test.go runs promtool's rule checks under `go test` where
// promtool is installed (Debian's `prometheus` package, which `make
// check-metrics` installs): a rule edited without its unit test, or a unit
// test left behind by a rule, fails here, not only under make check-metrics.

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/backstream/backstream/internal/citest"
)

// TestAlertRuleUnitTests is `promtool check rules deploy/alerts.yml` and
// `promtool test rules deploy/alerts_test.yml`. Skipped without promtool,
// except in CI, whose script installs it.
func TestAlertRuleUnitTests(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		citest.Need(t, "no promtool (apt-get install prometheus, or make check-metrics)")
	}
	dir := filepath.Join(repoRoot(t), "deploy")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
