package firehose

// errors.go owns the package's sentinel errors.

import "errors"

// ErrConfig: New was given an unusable Config (no relay, no writer, unknown
// mode, negative durations or limits).
var ErrConfig = errors.New("invalid consumer config")

// ErrUnitRefused: the writer refused a unit this consumer built (an invalid
// row slipped past validation, or a live-mode unit was given to the capture
// writer). The frame's rows and cursor were not applied, so the consumer
// stops rather than leave a silent hole.
var ErrUnitRefused = errors.New("writer refused a firehose unit")

// ErrRunning: Run was called while another Run of the same Consumer is active.
var ErrRunning = errors.New("consumer already running")
