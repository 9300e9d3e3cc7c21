package procstat

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// tick is one clock tick, the unit of the CPU times in /proc/<pid>/stat and
// /proc/stat. The kernel always reports them in USER_HZ, which is 100 a
// second on every architecture Go supports on Linux whatever the kernel's
// own HZ (only alpha and ia64 differ); reading sysconf(_SC_CLK_TCK) would
// need cgo to learn the same constant.
const tick = time.Second / 100

// CPU is the user plus system CPU time process pid has used so far (its
// threads included, its waited-for children not).
func CPU(pid int) (time.Duration, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	d, err := parseStat(string(b))
	if err != nil {
		return 0, fmt.Errorf("procstat: %s: %w", path, err)
	}
	return d, nil
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat
// line. The command name (field 2, in parentheses) may hold spaces and
// parentheses of its own, so the fields are counted from after the last
// ')': there, field 3 (the state) is the first.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no command name in parentheses")
	}
	f := strings.Fields(s[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(f), stime+1)
	}
	return ticks(f[utime], f[stime])
}

// StatusKB is the value of field (e.g. "VmHWM") in process pid's
// /proc/<pid>/status, in KiB. A field that is absent (a zombie has no
// memory lines) or not in kB is an error.
func StatusKB(pid int, field string) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	kb, err := parseStatusKB(string(b), field)
	if err != nil {
		return 0, fmt.Errorf("procstat: %s: %w", path, err)
	}
	return kb, nil
}

// PeakRSS is process pid's peak resident set (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) {
	kb, err := StatusKB(pid, "VmHWM")
	return kb << 10, err
}

// parseStatusKB finds the line "field:  N kB" of a status file.
func parseStatusKB(s, field string) (int64, error) {
	for _, line := range strings.Split(s, "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: %q is not a size in kB", field, line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s: %q is not a size in kB", field, line)
		}
		return n, nil
	}
	return 0, fmt.Errorf("no %s line", field)
}

// MachineBusy is the CPU time all the machine's CPUs have spent busy since
// boot: user, nice, system and steal from the "cpu" line of /proc/stat.
// Interrupt time is left out: on a test machine most of it is the loopback
// traffic of the test's own connections, which its processes' CPU
// (CPU) does not count either.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	d, err := parseMachineBusy(string(b))
	if err != nil {
		return 0, fmt.Errorf("procstat: /proc/stat: %w", err)
	}
	return d, nil
}

// parseMachineBusy reads the first line of /proc/stat:
// "cpu user nice system idle iowait irq softirq steal ...".
func parseMachineBusy(s string) (time.Duration, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("first line %q is not a cpu line of at least 8 counters", line)
	}
	return ticks(f[1], f[2], f[3], f[8])
}

// ticks is the sum of counts of clock ticks, as a duration.
func ticks(counts ...string) (time.Duration, error) {
	var sum uint64
	for _, c := range counts {
		n, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a count of clock ticks", c)
		}
		if limit := uint64(math.MaxInt64 / tick); n > limit || sum+n > limit {
			return 0, fmt.Errorf("%q clock ticks overflow a duration", c)
		}
		sum += n
	}
	return time.Duration(sum) * tick, nil
}
