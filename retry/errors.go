package retry

import "errors"

// ErrRunning: Run (or the tests' RunOnce) was called while another one is
// still running on the same Runner (a Runner drives one scheduler at a time).
var ErrRunning = errors.New("retry: runner already running")

// ErrFatal wraps every error that stopped Run: a store read or decode
// failure, a writer that stopped or refused a unit, a job error that is not a
// per-repo outcome, or a panic in the runner (S6). Per-repo remote failures
// never take this path.
var ErrFatal = errors.New("retry: fatal")
