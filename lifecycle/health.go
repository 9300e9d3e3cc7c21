package lifecycle

// health.go owns what a running process tells its probes: ready means the
// phase is steady_state and nothing has failed; healthy means nothing has
// failed. A fatal error (the store, the writer, the machinery) is recorded
// the moment it is seen, so from then until the process is gone both probes
// answer "no" — a process stuck on its way down never looks alive.

import (
	"sync"

	"github.com/backstream/backstream/archive"
)

// Health is the process's probe state. The zero value is not ready (no
// phase yet) and healthy. Safe for concurrent use.
type Health struct {
	mu    sync.Mutex
	phase archive.Phase
	fatal error
}

// SetPhase records the phase the lifecycle reports (Config.OnPhase).
func (h *Health) SetPhase(p archive.Phase) {
	h.mu.Lock()
	h.phase = p
	h.mu.Unlock()
}

// Phase is the phase last recorded.
func (h *Health) Phase() archive.Phase {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phase
}

// Fail records a fatal error; the first one is kept. A nil error is ignored.
func (h *Health) Fail(err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	if h.fatal == nil {
		h.fatal = err
	}
	h.mu.Unlock()
}

// Err is the fatal error, nil while healthy (/healthz).
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fatal
}

// Ready reports whether clients may be served: steady_state and no fatal
// error (/readyz).
func (h *Health) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phase == archive.PhaseSteadyState && h.fatal == nil
}
