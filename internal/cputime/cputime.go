// Package cputime reads the process's CPU time for the benchmarks that
// report CPU per operation, shared by the packages' tests (nothing in
// production imports it).
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process is the user and system CPU the process has used so far.
func Process(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
