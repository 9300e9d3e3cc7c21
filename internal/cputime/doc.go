// Package cputime owns the one way the benchmarks read the CPU time of
// their own process: user plus system time from getrusage(RUSAGE_SELF).
// On a shared, noisy machine CPU time is steadier than wall time, so the
// benchmarks report their cost in it.
//
// # What it provides
//
//   - Process: the CPU the process has used so far, as a time.Duration;
//     a benchmark takes one reading before its loop and one after, and
//     reports the difference in whatever unit its results quote
//     (cpu-s/Mevents, records/cpu-s, ...).
//   - MicrosPerOp: the CPU microseconds per b.N iteration since a Process
//     reading, for the many benchmarks that report cpu-µs per operation.
//
// # Not here
//
// The CPU of other processes (a child serve, the nats servers, the
// simulated network's hosts) is package procstat's (/proc/<pid>/stat,
// in clock ticks), or a child's os.ProcessState once it has exited.
// Nothing in production imports this package: it takes a testing.TB.
package cputime
