package subscribe

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestReadyzLagging: while the archive is behind its relay (Lagging says
// why), /readyz answers 503 naming the reason, and /subscribe still serves
// what the archive has; once Lagging clears, /readyz is 200 again.
func TestReadyzLagging(t *testing.T) {
	var lag atomic.Pointer[error]
	behind := errors.New("the archive is 7m0s behind the relay (max stale 5m0s)")
	lag.Store(&behind)
	h := newHarness(t, harnessOpts{cfg: Config{Lagging: func() error {
		if p := lag.Load(); p != nil {
			return *p
		}
		return nil
	}}})
	readyz := func() (int, string) {
		resp, err := http.Get(h.url("/readyz"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "7m0s behind") {
		t.Fatalf("readyz while lagging: %d %q", code, body)
	}
	h.dial("", nil).Close() // subscribers are still served
	lag.Store(nil)
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz after catching up: %d %q", code, body)
	}
}
