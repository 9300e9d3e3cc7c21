package procstat

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/cputime"
)

// TestCPUSelf: this process's CPU from /proc/<pid>/stat grows with the CPU
// getrusage counts while the test spins, within tick rounding.
func TestCPUSelf(t *testing.T) {
	pid := os.Getpid()
	p0, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	r0 := cputime.Process(t)
	spin := 300 * time.Millisecond
	for sink := 0; cputime.Process(t)-r0 < spin; sink++ {
		for i := range 100_000 {
			sink ^= i
		}
	}
	r := cputime.Process(t) - r0
	p1, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// getrusage is exact; /proc counts whole ticks, and the process's
	// other threads (the garbage collector, the test runner) run on too.
	if got := p1 - p0; got < r/2 || got > 2*r+10*tick {
		t.Fatalf("CPU grew by %v while getrusage counted %v", got, r)
	}
}

// TestStatusKBSelf: touching 64 MiB shows in VmRSS, in KiB, and VmHWM is
// at least VmRSS.
func TestStatusKBSelf(t *testing.T) {
	pid := os.Getpid()
	rss0, err := StatusKB(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	b := make([]byte, size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	rss1, err := StatusKB(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := StatusKB(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(b)
	// The bounds are loose (the race detector's shadow memory doubles the
	// growth) but catch a wrong unit: pages, bytes, MiB.
	if grew := rss1 - rss0; grew < size/2>>10 || grew > 8*size>>10 {
		t.Fatalf("VmRSS grew from %d to %d KiB after touching %d KiB", rss0, rss1, size>>10)
	}
	if hwm < rss1 {
		t.Fatalf("VmHWM %d KiB < VmRSS %d KiB", hwm, rss1)
	}
	// The peak only grows: read after it, PeakRSS is at least VmHWM, in bytes.
	if peak, err := PeakRSS(pid); err != nil || peak < hwm<<10 || peak > 2*hwm<<10 {
		t.Fatalf("PeakRSS %d bytes, %v; want about VmHWM's %d KiB in bytes", peak, err, hwm)
	}
}

func TestMachineBusy(t *testing.T) {
	b0, err := MachineBusy()
	if err != nil {
		t.Fatal(err)
	}
	r0 := cputime.Process(t)
	for sink := 0; cputime.Process(t)-r0 < 100*time.Millisecond; sink++ {
		sink ^= sink >> 1
	}
	b1, err := MachineBusy()
	if err != nil {
		t.Fatal(err)
	}
	// The machine was busy at least while this process spun (less one
	// tick of rounding at each end).
	if b0 <= 0 || b1-b0 < 100*time.Millisecond-2*tick {
		t.Fatalf("machine busy %v then %v, across 100 ms of this process's CPU", b0, b1)
	}
}

func TestCPUGone(t *testing.T) {
	if _, err := CPU(-1); err == nil || !strings.Contains(err.Error(), "/proc/-1/stat") {
		t.Fatalf("CPU(-1) = %v, want an error naming the file", err)
	}
	if _, err := StatusKB(-1, "VmRSS"); err == nil {
		t.Fatal("StatusKB(-1) gave no error")
	}
}

// statLine is a real /proc/<pid>/stat line with comm replacing the command
// name: utime 250 and stime 50 ticks (3 s).
func statLine(comm string) string {
	return "4242 (" + comm + ") S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 9 20 0 12 0 100 1000 200 18446744073709551615\n"
}

func TestParseStat(t *testing.T) {
	for _, comm := range []string{"backstream", "back stream", "a) b", "x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 (", ")", "(("} {
		got, err := parseStat(statLine(comm))
		if err != nil || got != 3*time.Second {
			t.Errorf("command %q: %v, %v; want 3s", comm, got, err)
		}
	}
	for _, bad := range []string{
		"",
		"4242 backstream S 1",
		"4242 (x) S 1 2",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 2x0 50 0 0",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 -50 0 0",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 18446744073709551615 0 0",
	} {
		if got, err := parseStat(bad); err == nil {
			t.Errorf("%q parsed as %v", bad, got)
		}
	}
}

const status = "Name:\tbackstream\nState:\tS (sleeping)\nVmHWM:\t  123456 kB\nVmRSS:\t   65432 kB\nThreads:\t12\n"

func TestParseStatusKB(t *testing.T) {
	for field, want := range map[string]int64{"VmHWM": 123456, "VmRSS": 65432} {
		if got, err := parseStatusKB(status, field); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", field, got, err, want)
		}
	}
	for _, c := range []struct{ s, field string }{
		{status, "VmPeak"},  // absent
		{status, "VmHW"},    // a prefix of a field is not the field
		{status, "Threads"}, // not in kB
		{status, "Name"},
		{"VmRSS:\t12x kB\n", "VmRSS"},
		{"VmRSS:\t-12 kB\n", "VmRSS"},
		{"VmRSS:\t12 MB\n", "VmRSS"},
		{"VmRSS:\t12 kB 3\n", "VmRSS"},
		{"VmRSS:\n", "VmRSS"},
		{"", "VmRSS"},
	} {
		if got, err := parseStatusKB(c.s, c.field); err == nil {
			t.Errorf("%s in %q parsed as %d", c.field, c.s, got)
		}
	}
}

func TestParseMachineBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal: 100+20+30+5 ticks.
	got, err := parseMachineBusy("cpu  100 20 30 999 7 8 9 5 0 0\ncpu0 50 10 15 500 3 4 4 2 0 0\n")
	if err != nil || got != 1550*time.Millisecond {
		t.Fatalf("busy = %v, %v; want 1.55s", got, err)
	}
	for _, bad := range []string{
		"",
		"cpu  100 20 30 999 7 8 9\n",
		"cpu0 100 20 30 999 7 8 9 5 0 0\n",
		"intr 100 20 30 999 7 8 9 5 0 0\ncpu  100 20 30 999 7 8 9 5 0 0\n",
		"cpu  100 20 3O 999 7 8 9 5 0 0\n",
	} {
		if got, err := parseMachineBusy(bad); err == nil {
			t.Errorf("%q parsed as %v", bad, got)
		}
	}
}
