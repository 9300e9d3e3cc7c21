package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process is the user and system CPU the process has used so far.
func Process(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("cputime: getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MicrosPerOp is the CPU the process has used since start (a Process
// reading taken before the loop), in microseconds per b.N iteration.
func MicrosPerOp(b *testing.B, start time.Duration) float64 {
	b.Helper()
	return float64(Process(b)-start) / float64(time.Microsecond) / float64(b.N)
}
