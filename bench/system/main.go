// Command system is the system benchmark behind `make bench-system`
// (scripts/bench.sh): the built backstream binary bootstraps a simulated
// network, both as separate processes, and the numbers are those of the
// backstream process alone.
//
// For each shape (accounts × mean records per account) and each run it
// starts `backstream devnet`, then `backstream serve` on a fresh data dir,
// and samples serve's /proc/<pid>/stat (utime+stime) and /status every
// 50 ms. When /status first reports backfill_completed_at it reads the
// CPU-seconds spent so far and the durable backfill records
// (backstream_backfill_records_total), giving bootstrap records per
// CPU-second; records/s and repos/s are over backfill_started_at →
// backfill_completed_at. Once serve reaches steady_state it reads the peak
// RSS (VmHWM), stops serve with SIGTERM and measures the store on disk as
// serve left it (allocated blocks, which count Pebble's WAL preallocation,
// and apparent size), then opens the stopped store, flushes and compacts
// it fully, closes it and measures again: bytes on disk per archived event
// (the archive tip seq) are from that compacted store, everything in
// <data-dir>/store included.
//
// The machine is shared and noisy: each shape runs -runs times and the
// medians are reported. Results are written as JSON to -out/<date>.json and
// printed as a table. It does not own or change any backstream package.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/backstream/backstream/archive"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

type shape struct{ Accounts, Records int }

func (s shape) String() string { return fmt.Sprintf("%dx%d", s.Accounts, s.Records) }

// run is one measured bootstrap.
type run struct {
	Shape              string  `json:"shape"`
	Run                int     `json:"run"`
	Repos              int64   `json:"repos_complete"`
	Records            int64   `json:"records"`
	BootstrapCPUSecs   float64 `json:"bootstrap_cpu_seconds"`
	RecordsPerCPUSec   float64 `json:"records_per_cpu_second"`
	BootstrapWallSecs  float64 `json:"bootstrap_wall_seconds"`
	RecordsPerSec      float64 `json:"records_per_second"`
	ReposPerSec        float64 `json:"repos_per_second"`
	PeakRSSBytes       int64   `json:"peak_rss_bytes"`
	ArchiveEvents      int64   `json:"archive_events"`
	StoreBytesOnDisk   int64   `json:"store_bytes_on_disk"`      // as serve left it
	StoreBytesApparent int64   `json:"store_bytes_apparent"`     // as serve left it
	CompactedBytes     int64   `json:"compacted_store_bytes"`    // on disk, after flush + full compaction
	BytesPerEvent      float64 `json:"bytes_on_disk_per_event"`  // compacted / archive events
	ApparentPerEvent   float64 `json:"apparent_bytes_per_event"` // as left by serve / archive events
	SteadyStateSecs    float64 `json:"seconds_to_steady_state"`
}

type report struct {
	Date     string            `json:"date"`
	Commit   string            `json:"commit,omitempty"`
	Host     map[string]string `json:"host"`
	Settings map[string]any    `json:"settings"`
	Runs     []run             `json:"runs"`
	Medians  []run             `json:"medians"`
}

func main() {
	bin := flag.String("bin", "bin/backstream", "the backstream binary")
	shapesFlag := flag.String("shapes", "2000x200", "comma-separated accounts x mean records per account")
	runs := flag.Int("runs", 3, "runs per shape (medians are reported)")
	out := flag.String("out", "bench/results", "directory of the JSON results (empty: none)")
	workers := flag.Int("workers", 100, "serve --backfill-workers")
	rate := flag.Float64("rate", 50, "devnet --rate (live events per second during the bootstrap)")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up on one run after this long")
	flag.Parse()

	var shapes []shape
	for _, s := range strings.Split(*shapesFlag, ",") {
		var sh shape
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%dx%d", &sh.Accounts, &sh.Records); err != nil {
			fail(fmt.Errorf("-shapes %q: want AxR, e.g. 2000x200", s))
		}
		shapes = append(shapes, sh)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := report{
		Date:   time.Now().UTC().Format(time.RFC3339),
		Commit: gitCommit(),
		Host: map[string]string{
			"cpus": strconv.Itoa(runtime.NumCPU()), "goos": runtime.GOOS, "goarch": runtime.GOARCH,
			"kernel": strings.TrimSpace(readString("/proc/sys/kernel/osrelease")),
		},
		Settings: map[string]any{"workers": *workers, "devnet_rate": *rate, "runs": *runs, "shapes": *shapesFlag,
			"binary_cgo": binaryCgo(*bin)},
	}
	for _, sh := range shapes {
		var rs []run
		for i := 1; i <= *runs; i++ {
			fmt.Fprintf(os.Stderr, "bench: %s run %d/%d ...\n", sh, i, *runs)
			r, err := measure(ctx, *bin, sh, *workers, *rate, *timeout)
			if err != nil {
				fail(fmt.Errorf("%s run %d: %w", sh, i, err))
			}
			r.Run = i
			fmt.Fprintf(os.Stderr, "bench: %s run %d: %.0f records/CPU-s, %.0f records/s, peak RSS %s, %.1f B/event\n",
				sh, i, r.RecordsPerCPUSec, r.RecordsPerSec, mib(r.PeakRSSBytes), r.BytesPerEvent)
			rs = append(rs, r)
		}
		rep.Runs = append(rep.Runs, rs...)
		rep.Medians = append(rep.Medians, medians(rs))
	}
	printTable(os.Stdout, rep)
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fail(err)
		}
		path := filepath.Join(*out, time.Now().UTC().Format("2006-01-02T150405Z")+".json")
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("\nwritten to %s\n", path)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// measure runs one bootstrap of sh and returns its numbers.
func measure(parent context.Context, bin string, sh shape, workers int, rate float64, timeout time.Duration) (run, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	r := run{Shape: sh.String()}
	dir, err := os.MkdirTemp("", "backstream-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)

	// The simulated network: its first stdout line is the relay URL.
	relayAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	devnet := exec.Command(bin, "devnet", "--listen", relayAddr, "--accounts", strconv.Itoa(sh.Accounts),
		"--records", strconv.Itoa(sh.Records), "--rate", strconv.FormatFloat(rate, 'g', -1, 64), "--log-format", "json")
	devnet.Env = cleanEnv()
	devnetLog, err := os.Create(filepath.Join(dir, "devnet.log"))
	if err != nil {
		return r, err
	}
	defer devnetLog.Close()
	devnet.Stderr = devnetLog
	stdout, err := devnet.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := devnet.Start(); err != nil {
		return r, err
	}
	defer stopProcess(devnet)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var relayURL string
	select {
	case relayURL = <-lines:
	case <-ctx.Done():
		return r, fmt.Errorf("devnet did not start: %w (log: %s)", ctx.Err(), devnetLog.Name())
	}
	if !strings.HasPrefix(relayURL, "http") {
		return r, fmt.Errorf("devnet printed %q, not its relay URL (log: %s)", relayURL, tail(devnetLog.Name()))
	}

	listen, err := freeAddr()
	if err != nil {
		return r, err
	}
	data := filepath.Join(dir, "data")
	serve := exec.Command(bin, "serve", "--relay", relayURL, "--data-dir", data, "--listen", listen,
		"--backfill-workers", strconv.Itoa(workers), "--capture-wait", "5s", "--log-format", "json")
	serve.Env = cleanEnv()
	serveLog, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return r, err
	}
	defer serveLog.Close()
	serve.Stdout, serve.Stderr = serveLog, serveLog
	started := time.Now()
	if err := serve.Start(); err != nil {
		return r, err
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		if serve.ProcessState == nil {
			_ = serve.Process.Kill()
			<-exited
		}
	}()
	pid := serve.Process.Pid

	c := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + listen
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	bootstrapDone := false
	for {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("no steady_state: %w (serve log: %s)", ctx.Err(), tail(serveLog.Name()))
		case err := <-exited:
			return r, fmt.Errorf("serve exited: %v: %s", err, tail(serveLog.Name()))
		case <-tick.C:
		}
		cpu, cpuErr := cpuSeconds(pid)
		var st status
		if err := getJSON(c, base+"/status", &st); err != nil || cpuErr != nil {
			continue
		}
		if !bootstrapDone && st.BackfillCompletedAt != nil && st.BackfillStartedAt != nil {
			bootstrapDone = true
			r.BootstrapCPUSecs = cpu
			recs, err := scrapeValue(c, base+"/metrics", "backstream_backfill_records_total")
			if err != nil {
				return r, err
			}
			r.Records = int64(recs)
			r.Repos = st.Repos["complete"]
			r.BootstrapWallSecs = st.BackfillCompletedAt.Sub(*st.BackfillStartedAt).Seconds()
		}
		if bootstrapDone && st.Phase == "steady_state" {
			r.SteadyStateSecs = time.Since(started).Seconds()
			r.PeakRSSBytes = vmHWM(pid)
			r.ArchiveEvents = int64(st.Archive.TipSeq)
			break
		}
	}
	_ = serve.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = serve.Process.Kill()
		<-exited
		return r, errors.New("serve did not stop within a minute of SIGTERM")
	}
	r.StoreBytesOnDisk, r.StoreBytesApparent, err = dirSize(filepath.Join(data, "store"))
	if err != nil {
		return r, err
	}
	if err := compact(data); err != nil {
		return r, err
	}
	if r.CompactedBytes, _, err = dirSize(filepath.Join(data, "store")); err != nil {
		return r, err
	}
	if r.BootstrapCPUSecs > 0 {
		r.RecordsPerCPUSec = float64(r.Records) / r.BootstrapCPUSecs
	}
	if r.BootstrapWallSecs > 0 {
		r.RecordsPerSec = float64(r.Records) / r.BootstrapWallSecs
		r.ReposPerSec = float64(r.Repos) / r.BootstrapWallSecs
	}
	if r.ArchiveEvents > 0 {
		r.BytesPerEvent = float64(r.CompactedBytes) / float64(r.ArchiveEvents)
		r.ApparentPerEvent = float64(r.StoreBytesApparent) / float64(r.ArchiveEvents)
	}
	return r, nil
}

// compact opens a stopped store, flushes and compacts it fully, and closes
// it: the manual compaction before the bytes-per-event measurement.
func compact(dataDir string) error {
	s, err := archive.Open(dataDir, archive.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	db := s.DB()
	err = db.Flush()
	if err == nil {
		err = db.Compact([]byte{0}, bytes.Repeat([]byte{0xff}, 64), true)
	}
	return errors.Join(err, s.Close())
}

type status struct {
	Phase               string           `json:"phase"`
	BackfillStartedAt   *time.Time       `json:"backfill_started_at"`
	BackfillCompletedAt *time.Time       `json:"backfill_completed_at"`
	Repos               map[string]int64 `json:"repos"`
	Archive             struct {
		TipSeq uint64 `json:"tip_seq"`
	} `json:"archive"`
}

func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// scrapeValue reads one unlabelled sample from /metrics.
func scrapeValue(c *http.Client, url, name string) (float64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no sample %s", url, name)
}

// cpuSeconds is utime+stime of a live process.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from after ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTicks, nil
}

// vmHWM is the peak resident set of a live process, in bytes.
func vmHWM(pid int) int64 {
	for _, line := range strings.Split(readString(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirSize sums the allocated blocks and the apparent sizes of every file
// under dir.
func dirSize(dir string) (onDisk, apparent int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			onDisk += st.Blocks * 512
		}
		if !d.IsDir() {
			apparent += info.Size()
		}
		return nil
	})
	return onDisk, apparent, err
}

func stopProcess(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BACKSTREAM_") {
			out = append(out, kv)
		}
	}
	return out
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(path string) string {
	s := readString(path)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// binaryCgo is the CGO_ENABLED setting the binary was built with ("0" or
// "1"; "" when unknown). It matters: with cgo Pebble's zstd is the C
// library, without it the pure-Go one, which peaks at more memory.
func binaryCgo(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "CGO_ENABLED=") {
			return strings.TrimPrefix(f[1], "CGO_ENABLED=")
		}
	}
	return ""
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// medians is the run whose every field is the median of rs's.
func medians(rs []run) run {
	med := func(get func(run) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		sort.Float64s(v)
		if n := len(v); n%2 == 1 {
			return v[n/2]
		} else {
			return (v[n/2-1] + v[n/2]) / 2
		}
	}
	return run{
		Shape:              rs[0].Shape,
		Repos:              int64(med(func(r run) float64 { return float64(r.Repos) })),
		Records:            int64(med(func(r run) float64 { return float64(r.Records) })),
		BootstrapCPUSecs:   med(func(r run) float64 { return r.BootstrapCPUSecs }),
		RecordsPerCPUSec:   med(func(r run) float64 { return r.RecordsPerCPUSec }),
		BootstrapWallSecs:  med(func(r run) float64 { return r.BootstrapWallSecs }),
		RecordsPerSec:      med(func(r run) float64 { return r.RecordsPerSec }),
		ReposPerSec:        med(func(r run) float64 { return r.ReposPerSec }),
		PeakRSSBytes:       int64(med(func(r run) float64 { return float64(r.PeakRSSBytes) })),
		ArchiveEvents:      int64(med(func(r run) float64 { return float64(r.ArchiveEvents) })),
		StoreBytesOnDisk:   int64(med(func(r run) float64 { return float64(r.StoreBytesOnDisk) })),
		StoreBytesApparent: int64(med(func(r run) float64 { return float64(r.StoreBytesApparent) })),
		CompactedBytes:     int64(med(func(r run) float64 { return float64(r.CompactedBytes) })),
		ApparentPerEvent:   med(func(r run) float64 { return r.ApparentPerEvent }),
		BytesPerEvent:      med(func(r run) float64 { return r.BytesPerEvent }),
		SteadyStateSecs:    med(func(r run) float64 { return r.SteadyStateSecs }),
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func printTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "backstream system benchmark, %s, commit %s, %s CPUs, binary CGO_ENABLED=%v (medians of %v runs; CPU of the serve process only)\n\n",
		rep.Date, rep.Commit, rep.Host["cpus"], rep.Settings["binary_cgo"], rep.Settings["runs"])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\trecords\tCPU-s\trecords/CPU-s\twall s\trecords/s\trepos/s\tpeak RSS\tevents\tcompacted store\tB/event\t")
	for _, m := range rep.Medians {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.2f\t%.0f\t%.0f\t%s\t%d\t%s\t%.1f\t\n",
			m.Shape, m.Records, m.BootstrapCPUSecs, m.RecordsPerCPUSec, m.BootstrapWallSecs, m.RecordsPerSec,
			m.ReposPerSec, mib(m.PeakRSSBytes), m.ArchiveEvents, mib(m.CompactedBytes), m.BytesPerEvent)
	}
	tw.Flush()
}
