package oracle

import "errors"

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("oracle: invalid config")

// ErrClosed is returned by Network methods called after Close.
var ErrClosed = errors.New("oracle: network closed")

// ErrEmptyEvent is returned when an event has none of its four bodies set.
var ErrEmptyEvent = errors.New("oracle: event has no body")
