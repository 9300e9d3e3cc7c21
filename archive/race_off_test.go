//go:build !race

package archive

// raceEnabled: see race_on_test.go.
const raceEnabled = false
