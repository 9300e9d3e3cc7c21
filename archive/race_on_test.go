//go:build race

package archive

// raceEnabled: the test binary runs under the race detector, whose
// sync.Pool drops a share of what is put back, so pooled objects (Pebble's
// iterators among them) are allocated again and allocation counts differ.
const raceEnabled = true
