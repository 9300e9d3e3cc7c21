// Package procstat owns the one reading of what Linux's /proc says about a
// process other than the reader, and about the machine: another process's
// CPU time (utime plus stime from /proc/<pid>/stat), a memory line of its
// /proc/<pid>/status in KiB (VmHWM, VmRSS, ...), and the machine's busy
// CPU time from /proc/stat. The tests and the system benchmark use it to
// measure the processes they start: a child serve, the nats servers, the
// simulated network's hosts.
//
// # What it provides
//
//   - CPU: a process's user plus system CPU time so far.
//   - StatusKB: one "Name: N kB" line of a process's status file.
//   - MachineBusy: the machine's user, nice, system and steal time.
//
// Every function returns an error, never panics and never reads a
// malformed or missing value as 0: a process that is gone, a short or
// odd line, a field that is not a number are each an error naming what
// was wrong. It takes no testing.TB, so the system benchmark (a command,
// not a test) uses it too.
//
// # Not here
//
// The benchmarks' reading of their own process's CPU is package cputime
// (getrusage(RUSAGE_SELF), exact to the nanosecond, no file to parse).
// The CPU of a child that has exited is its os.ProcessState. Production
// code imports neither: the running service reports its own CPU and
// memory through the Prometheus process collector.
package procstat
