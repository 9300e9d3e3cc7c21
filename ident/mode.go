package ident

import "fmt"

// Mode is the verification mode (--verify).
type Mode uint8

const (
	// ModeStrict resolves every DID, and drops (live) or fails (backfill)
	// whatever does not verify. The default.
	ModeStrict Mode = iota
	// ModeWarn resolves and checks, counts what fails, and archives it
	// anyway.
	ModeWarn
	// ModeOff resolves nothing and checks no signature: for a relay that
	// already verifies.
	ModeOff
)

func (m Mode) String() string {
	switch m {
	case ModeStrict:
		return "strict"
	case ModeWarn:
		return "warn"
	case ModeOff:
		return "off"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode reads strict, warn or off.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "strict", "":
		return ModeStrict, nil
	case "warn":
		return ModeWarn, nil
	case "off":
		return ModeOff, nil
	}
	return 0, fmt.Errorf("ident: verify mode %q: want strict, warn or off", s)
}
