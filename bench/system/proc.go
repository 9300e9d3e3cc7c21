package main

// proc.go owns the processes the benchmark runs (`backstream devnet` and
// `backstream serve`) and what it reads about them through package
// procstat: CPU-seconds (utime+stime) and peak RSS.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/internal/procstat"

	"github.com/backstream/backstream/internal/freeport"
)

// proc is one child process with its log file. Stop (or Kill) must be
// called; both wait for the process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when Wait returned
	err    error         // Wait's result, set before exited is closed
}

// startProc starts bin with args, stdout and stderr to <dir>/<name>.log,
// unless stdout is given (then only stderr goes to the log).
func startProc(dir, name, bin string, stdout io.Writer, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = procenv.Clean()
	// A benchmark killed outright (SIGKILL) must not leave its devnets and
	// serves running on the shared machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logf, logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logf, exited: make(chan struct{})}
	go func() { // owned: stop and kill wait for exited
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits up to grace, then kills. It reports an error
// when the process had to be killed or exited with a failure.
func (p *proc) stop(grace time.Duration) error {
	defer p.log.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within %v of SIGTERM", p.name, grace)
	}
	var ee *exec.ExitError
	if p.err != nil && !(errors.As(p.err, &ee) && ee.ExitCode() == -1) { // -1: killed by our signal
		return fmt.Errorf("%s exited: %v: %s", p.name, p.err, tail(p.log.Name()))
	}
	return nil
}

// kill ends the process at once (cleanup after a failure).
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
}

// alive reports an error if the process has exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v: %s", p.name, p.err, tail(p.log.Name()))
	default:
		return nil
	}
}

// cpu is the process's utime+stime in seconds.
func (p *proc) cpu() (float64, error) {
	d, err := procstat.CPU(p.pid())
	return d.Seconds(), err
}

// devnetArgs describes one `backstream devnet`.
type devnetArgs struct {
	Accounts, Records int
	Rate              float64
	Events            int // stop live traffic after this many (0 = never)
	Preload           int
	Traffic           string // "" = the devnet's default (full)
}

// startDevnet runs `backstream devnet` and returns it with its relay URL
// (the first line it prints, after the world and the preload are built).
func startDevnet(ctx context.Context, bin, dir, name string, a devnetArgs) (*proc, string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, "", err
	}
	args := []string{"devnet", "--listen", addr, "--accounts", strconv.Itoa(a.Accounts),
		"--records", strconv.Itoa(a.Records), "--rate", strconv.FormatFloat(a.Rate, 'g', -1, 64),
		"--log-format", "json"}
	if a.Events > 0 {
		args = append(args, "--events", strconv.Itoa(a.Events))
	}
	if a.Preload > 0 {
		args = append(args, "--preload-events", strconv.Itoa(a.Preload))
	}
	if a.Traffic != "" {
		args = append(args, "--traffic", a.Traffic)
	}
	pr, pw := io.Pipe()
	p, err := startProc(dir, name, bin, pw, args...)
	if err != nil {
		pw.Close()
		return nil, "", err
	}
	lines := make(chan string, 1)
	go func() { // owned: ends when the devnet's stdout closes (it exits)
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() { <-p.exited; pw.Close() }() // owned: ends with the process
	select {
	case url, ok := <-lines:
		if !ok || !strings.HasPrefix(url, "http") {
			p.kill()
			return nil, "", fmt.Errorf("devnet printed %q, not its relay URL: %s", url, tail(p.log.Name()))
		}
		return p, url, nil
	case <-ctx.Done():
		p.kill()
		return nil, "", fmt.Errorf("devnet did not start: %w (log: %s)", ctx.Err(), p.log.Name())
	}
}

// devnetStatus is the relay's last firehose seq and whether its traffic
// generator has finished (GET /_devnet/status).
func devnetStatus(c *http.Client, relay string) (seq int64, done bool, err error) {
	var st struct {
		Seq  int64 `json:"seq"`
		Done bool  `json:"done"`
	}
	if err := getJSON(c, relay+"/_devnet/status", &st); err != nil {
		return 0, false, err
	}
	return st.Seq, st.Done, nil
}

// devnetLiveRecords is the network's count of records that still exist
// (GET /_devnet/status live_records).
func devnetLiveRecords(c *http.Client, relay string) (int64, error) {
	var st struct {
		LiveRecords *int64 `json:"live_records"`
	}
	if err := getJSON(c, relay+"/_devnet/status", &st); err != nil {
		return 0, err
	}
	if st.LiveRecords == nil {
		return 0, errors.New("/_devnet/status: no live_records (a devnet binary that predates it?)")
	}
	return *st.LiveRecords, nil
}

// startServe runs `backstream serve` against relay on fresh listen
// addresses and returns it with the base URLs of its public listener
// (/status, /subscribe) and of its admin listener (/metrics, /debug/pprof/).
func startServe(bin, dir, name, relay, dataDir string, extra ...string) (p *proc, base, admin string, err error) {
	listen, err := freeport.Addr()
	if err != nil {
		return nil, "", "", err
	}
	adminListen, err := freeport.Addr()
	if err != nil {
		return nil, "", "", err
	}
	args := append([]string{"serve", "--relay", relay, "--data-dir", dataDir, "--listen", listen,
		"--admin-listen", adminListen, "--log-format", "json"}, extra...)
	if p, err = startProc(dir, name, bin, nil, args...); err != nil {
		return nil, "", "", err
	}
	return p, "http://" + listen, "http://" + adminListen, nil
}

// profile fetches a CPU profile of secs seconds from serve's
// /debug/pprof/profile (admin is its admin listener's URL) into path, in the background; the returned channel
// yields the result. An empty path does nothing (nil error at once).
func profile(admin string, secs int, path string) <-chan error {
	done := make(chan error, 1)
	if path == "" {
		done <- nil
		return done
	}
	go func() { // owned: bounded by the client timeout; callers wait on done
		c := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
		resp, err := c.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs))
		if err != nil {
			done <- fmt.Errorf("profile: %w", err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	return done
}

// status is the part of serve's /status the benchmark reads.
type status struct {
	Phase               string           `json:"phase"`
	BackfillStartedAt   *time.Time       `json:"backfill_started_at"`
	BackfillCompletedAt *time.Time       `json:"backfill_completed_at"`
	Repos               map[string]int64 `json:"repos"`
	Cursors             struct {
		Relay *uint64 `json:"relay"`
	} `json:"cursors"`
	Archive struct {
		TipSeq uint64 `json:"tip_seq"`
	} `json:"archive"`
}

// waitSteady polls base/status until phase is steady_state.
func waitSteady(ctx context.Context, c *http.Client, p *proc, base string) (status, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return status{}, fmt.Errorf("%s: no steady_state: %w: %s", p.name, ctx.Err(), tail(p.log.Name()))
		case <-p.exited:
			return status{}, p.alive()
		case <-tick.C:
		}
		var st status
		if err := getJSON(c, base+"/status", &st); err == nil && st.Phase == "steady_state" {
			return st, nil
		}
	}
}

func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// vmHWM is the peak resident set of a live process, in bytes. A peak that
// cannot be read fails the run: a 0 in the table would read as a result.
func vmHWM(pid int) (int64, error) {
	b, err := procstat.PeakRSS(pid)
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	return b, nil
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
