package crash

// proc.go owns one `backstream serve` child process: start, /status,
// /metrics, SIGKILL, SIGTERM, exit status and the tail of its log.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/freeport"
	"github.com/backstream/backstream/internal/procenv"
)

// Run describes one serve process.
type Run struct {
	Bin   string // the backstream binary (Binary)
	Relay string // --relay
	// LoopbackHosts: --loopback-hosts, the simulated network's PDS hosts
	// (oracle.Network.LoopbackHosts), for a relay on loopback.
	LoopbackHosts []string
	DataDir       string   // --data-dir
	LogDir        string   // where serve-<start time>-<random>.log is written; "" = the parent of DataDir
	Listen        string   // --listen; "" = a free loopback port
	Admin         string   // --admin-listen; "" = a free loopback port
	Env           []string // extra environment (e.g. BACKSTREAM_CRASHPOINT=name)
	Args          []string // extra serve flags
}

// Proc is one running (or ended) `backstream serve`.
type Proc struct {
	Cmd    *exec.Cmd
	Listen string // host:port of /status, /subscribe (the public listener)
	Admin  string // host:port of /metrics, /debug/pprof/, /admin/checkpoint (the admin listener)
	Log    string // path of its combined stdout+stderr
	Start  time.Time

	done chan struct{} // closed once the process is reaped
	err  error         // Wait's result, valid after done
}

// FreeAddr returns a loopback host:port that was free a moment ago, below
// the ephemeral range (freeport.Addr).
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Start starts `backstream serve` for r. The test's cleanup kills and reaps
// it if it is still running.
func Start(t testing.TB, r Run) *Proc {
	t.Helper()
	p := &Proc{Listen: r.Listen, Admin: r.Admin, done: make(chan struct{})}
	if p.Listen == "" {
		p.Listen = FreeAddr(t)
	}
	if p.Admin == "" {
		p.Admin = FreeAddr(t)
	}
	logDir := r.LogDir
	if logDir == "" {
		logDir = filepath.Dir(r.DataDir)
	}
	// Named by start time (sortable), unique by CreateTemp.
	logFile, err := os.CreateTemp(logDir, "serve-"+time.Now().UTC().Format("150405.000000")+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	p.Log = logFile.Name()
	args := []string{"serve", "--relay", r.Relay, "--data-dir", r.DataDir,
		"--listen", p.Listen, "--admin-listen", p.Admin, "--log-format", "json"}
	if len(r.LoopbackHosts) > 0 {
		args = append(args, "--loopback-hosts", strings.Join(r.LoopbackHosts, ","))
	}
	args = append(args, r.Args...)
	p.Cmd = exec.Command(r.Bin, args...)
	p.Cmd.Env = procenv.Clean(r.Env...)
	p.Cmd.Stdout, p.Cmd.Stderr = logFile, logFile
	p.Start = time.Now()
	if err := p.Cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Done is closed once the process has ended and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error (nil for exit 0); valid once Done.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Wait waits up to d for the process to end; ok=false on timeout.
func (p *Proc) Wait(d time.Duration) (err error, ok bool) {
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(d):
		return nil, false
	}
}

// ErrAlreadyExited: a kill found the process already ended, so the kill did
// not happen (the scenario's fault did not fire).
var ErrAlreadyExited = errors.New("crash: the process had already exited")

// Kill sends SIGKILL and waits for the process. It fails with
// ErrAlreadyExited if the process had ended before the signal, and with an
// error if it then ended other than by SIGKILL.
func (p *Proc) Kill() error {
	if p.Exited() {
		return fmt.Errorf("crash: kill: %w (%v)", ErrAlreadyExited, p.err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		if p.Exited() {
			return fmt.Errorf("crash: kill: %w (%v)", ErrAlreadyExited, p.err)
		}
		return fmt.Errorf("crash: kill: %w", err)
	}
	if err := p.Err(); !Killed(err) {
		return fmt.Errorf("crash: kill: the process ended by %v, not SIGKILL (it exited before the signal)", err)
	}
	return nil
}

// Stop sends SIGTERM and waits up to d; nil only for a clean exit 0.
func (p *Proc) Stop(d time.Duration) error {
	if p.Exited() {
		return fmt.Errorf("crash: stop: %w (%v)", ErrAlreadyExited, p.err)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("crash: stop: %w", err)
	}
	err, ok := p.Wait(d)
	if !ok {
		_ = p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("crash: stop: no exit within %v of SIGTERM", d)
	}
	if err != nil {
		return fmt.Errorf("crash: stop: %w", err)
	}
	return nil
}

// Killed reports whether a process ended by SIGKILL (a crash point firing or
// a harness kill).
func Killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Tail is the last 4 KB of the process's log.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Status fetches /status; ok=false while the process does not answer.
func (p *Proc) Status() (Status, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.Listen + "/status")
	if err != nil {
		return Status{}, false
	}
	defer resp.Body.Close()
	var s Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil {
		return Status{}, false
	}
	return s, true
}

// Metrics fetches the admin listener's /metrics: each series (name and
// labels, as the exposition spells them) to its value.
func (p *Proc) Metrics() (map[string]float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("crash: /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("crash: /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				out[l[:i]] = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("crash: /metrics: read: %w", err)
	}
	return out, nil
}
