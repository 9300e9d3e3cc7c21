// Package procenv is the environment a test or a benchmark starts a
// backstream process with: its own, without the BACKSTREAM_* variables an
// operator's shell may hold, so that a setting of theirs cannot change what
// the process is tested or measured on.
package procenv
