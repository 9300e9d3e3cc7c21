// Command mutate is backstream's mutation check: it applies
// a list of deliberate breaks to the production code, one at a time, runs the
// focused tests named for each, and reports whether the tests caught it.
// Every listed break must be caught by at least one test; a survivor means an
// invariant test is missing or blind.
//
// Usage, from the repository root (the tree must not be edited meanwhile):
//
//	go run ./scripts/mutate                 # every mutant, baseline first
//	go run ./scripts/mutate -run ratchet    # mutants whose id or name match
//	go run ./scripts/mutate -list           # print the mutants, run nothing
//	go run ./scripts/mutate -md scripts/mutate.md   # also write the table
//
// Each mutant is one exact search/replace in one file; the search text must
// occur exactly once (otherwise the mutant is STALE and the run fails: fix
// the mutant, never the code). For each mutant the driver
//
//  1. saves the file (in memory and under $TMPDIR/backstream-mutate-<hash of
//     the repository path>, with a state file naming it),
//  2. writes the mutated file,
//  3. runs each test command (`go test -count=1 ...`) with a timeout,
//  4. restores the file and checks it is byte-identical to the original.
//
// A test command that exits non-zero kills the mutant (KILLED, with the
// failing test names); a compile error is BUILD-BROKEN (the mutant is wrong);
// nothing failing is SURVIVED. The file is restored on every path: normal
// end, error, panic, SIGINT/SIGTERM/SIGHUP (the running test's process group
// is killed first). If the driver itself is SIGKILLed, the next run restores
// the file from the saved copy before doing anything else (or run
// `git checkout -- <file>`). At the end it runs `git diff --stat` over the
// mutated files and fails if anything is left.
//
// Before the mutants, the baseline runs every distinct test command on the
// unmutated tree: a command that already fails would "kill" every mutant
// and prove nothing, so the run stops (-baseline=false skips this).
//
// Exit status: 0 when every selected mutant was KILLED; 1 otherwise.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Test is one focused test command: go test -count=1 [-short] Pkg -run Run.
type Test struct {
	Pkg   string // package pattern, e.g. ./archive
	Run   string // -run regexp
	Long  bool   // run without -short (the test skips under -short)
	Extra []string
}

func (t Test) args(timeout time.Duration) []string {
	a := []string{"test", "-count=1", "-timeout", timeout.String()}
	if !t.Long {
		a = append(a, "-short")
	}
	a = append(a, t.Extra...)
	return append(a, t.Pkg, "-run", t.Run)
}

func (t Test) String() string {
	s := "go test " + t.Pkg + " -run '" + t.Run + "'"
	if t.Long {
		s += " (no -short)"
	}
	return s
}

// Mutant is one deliberate break.
type Mutant struct {
	ID        string // stable id, m01...
	Name      string // what the break models
	Invariant string // ids from docs/invariants.md
	File      string // repo-relative
	Old, New  string // exact search / replacement; Old must occur exactly once
	Tests     []Test
}

// Result is what became of one mutant.
type Result struct {
	M       *Mutant
	Outcome string   // KILLED, SURVIVED, BUILD-BROKEN, STALE
	Caught  []string // failing tests (top-level names) per command, "pkg: TestX"
	Note    string
	Took    time.Duration
}

var (
	flagRun      = flag.String("run", "", "only mutants whose id or name matches this regexp")
	flagList     = flag.Bool("list", false, "list the mutants and exit")
	flagBaseline = flag.Bool("baseline", true, "run every test command on the unmutated tree first")
	flagTimeout  = flag.Duration("timeout", 5*time.Minute, "timeout of one test command")
	flagMD       = flag.String("md", "", "write the result table (markdown) to this file")
	flagAll      = flag.Bool("all", false, "run every test command of a mutant even after one killed it")
	flagV        = flag.Bool("v", false, "print the output of failing commands")
)

// guard owns the one file that may be mutated at any instant.
type guard struct {
	mu      sync.Mutex
	file    string // absolute path of the mutated file, "" when none
	orig    []byte
	mode    os.FileMode
	cmd     *exec.Cmd // running test command, for the signal path
	saveDir string
}

func (g *guard) statePath() string { return filepath.Join(g.saveDir, "state") }
func (g *guard) copyPath() string  { return filepath.Join(g.saveDir, "original") }

// recover restores a file a previous, killed run left mutated.
func (g *guard) recoverLeftover() error {
	state, err := os.ReadFile(g.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	orig, err := os.ReadFile(g.copyPath())
	if err != nil {
		return fmt.Errorf("a previous run left %s mutated and its saved copy is unreadable (%v): run git checkout -- %s", state, err, state)
	}
	if err := os.WriteFile(string(state), orig, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "mutate: restored %s, left mutated by a previous run that was killed\n", state)
	return os.RemoveAll(g.saveDir)
}

func (g *guard) apply(file string, mutated []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	orig, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(g.saveDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(g.copyPath(), orig, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(g.statePath(), []byte(file), 0o644); err != nil {
		return err
	}
	g.file, g.orig, g.mode = file, orig, st.Mode().Perm()
	return os.WriteFile(file, mutated, g.mode)
}

// restore puts the original back and verifies it; safe to call twice.
func (g *guard) restore() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.restoreLocked()
}

func (g *guard) restoreLocked() error {
	if g.file == "" {
		return nil
	}
	if err := os.WriteFile(g.file, g.orig, g.mode); err != nil {
		return fmt.Errorf("restore %s: %w (run git checkout -- %s)", g.file, err, g.file)
	}
	back, err := os.ReadFile(g.file)
	if err != nil || !bytes.Equal(back, g.orig) {
		return fmt.Errorf("restore %s: file differs after restore (run git checkout -- %s)", g.file, g.file)
	}
	g.file, g.orig = "", nil
	return os.RemoveAll(g.saveDir)
}

func (g *guard) setCmd(c *exec.Cmd) {
	g.mu.Lock()
	g.cmd = c
	g.mu.Unlock()
}

// onSignal kills the running test, restores the file and exits.
func (g *guard) onSignal(sig os.Signal) {
	g.mu.Lock()
	if g.cmd != nil && g.cmd.Process != nil {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	}
	err := g.restoreLocked()
	g.mu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(3)
	}
	fmt.Fprintf(os.Stderr, "mutate: %v: file restored, stopping\n", sig)
	os.Exit(130)
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// runTest runs one test command; failed reports a non-zero exit that is not
// a build failure.
func runTest(g *guard, t Test, timeout time.Duration) (failed, broken bool, names []string, out string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", t.args(timeout)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return false, true, nil, err.Error()
	}
	g.setCmd(cmd)
	err := cmd.Wait()
	g.setCmd(nil)
	out = buf.String()
	if err == nil {
		return false, false, nil, out
	}
	if strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") ||
		strings.Contains(out, "build constraints exclude") {
		return false, true, nil, out
	}
	seen := map[string]bool{}
	for _, m := range failRE.FindAllStringSubmatch(out, -1) {
		name := m[1]
		if i := strings.IndexByte(name, '/'); i >= 0 {
			name = name[:i]
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		switch {
		case strings.Contains(out, "panic: test timed out"), ctx.Err() != nil:
			names = []string{"(timeout: liveness break)"}
		case strings.Contains(out, "panic:"):
			names = []string{"(panic)"}
		default:
			names = []string{"(exit " + err.Error() + ")"}
		}
	}
	return true, false, names, out
}

func main() {
	flag.Parse()
	if _, err := os.Stat("go.mod"); err != nil {
		fatal("run from the repository root (no go.mod here)")
	}
	root, _ := os.Getwd()
	sum := sha256.Sum256([]byte(root))
	g := &guard{saveDir: filepath.Join(os.TempDir(), fmt.Sprintf("backstream-mutate-%x", sum[:6]))}
	if err := g.recoverLeftover(); err != nil {
		fatal(err.Error())
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() { g.onSignal(<-sigs) }()
	defer func() {
		if r := recover(); r != nil {
			_ = g.restore()
			panic(r)
		}
	}()

	var sel []*Mutant
	var re *regexp.Regexp
	if *flagRun != "" {
		re = regexp.MustCompile(*flagRun)
	}
	for i := range mutants {
		m := &mutants[i]
		if re == nil || re.MatchString(m.ID) || re.MatchString(m.Name) {
			sel = append(sel, m)
		}
	}
	if *flagList {
		for _, m := range sel {
			fmt.Printf("%s  %-8s %s\n     %s\n", m.ID, m.Invariant, m.Name, m.File)
			for _, t := range m.Tests {
				fmt.Printf("       %s\n", t)
			}
		}
		return
	}

	// Refuse to mutate files with uncommitted edits: the final check could
	// not tell a leftover mutant from someone's work.
	files := map[string]bool{}
	for _, m := range sel {
		files[m.File] = true
	}
	fileList := slices.Sorted(func(yield func(string) bool) {
		for f := range files {
			if !yield(f) {
				return
			}
		}
	})
	if out, err := exec.Command("git", append([]string{"status", "--porcelain", "--"}, fileList...)...).Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		fatal("uncommitted changes in files to mutate:\n" + string(out))
	}

	// Stale check up front: every search text occurs exactly once.
	stale := false
	for _, m := range sel {
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			fatal(err.Error())
		}
		if n := bytes.Count(src, []byte(m.Old)); n != 1 {
			fmt.Fprintf(os.Stderr, "mutate: %s STALE: search text occurs %d times in %s\n", m.ID, n, m.File)
			stale = true
		}
	}
	if stale {
		fatal("stale mutants: update the list in scripts/mutate/mutants.go")
	}

	if *flagBaseline {
		done := map[string]bool{}
		for _, m := range sel {
			for _, t := range m.Tests {
				k := strings.Join(t.args(0), " ")
				if done[k] {
					continue
				}
				done[k] = true
				start := time.Now()
				failed, broken, names, out := runTest(g, t, *flagTimeout)
				fmt.Printf("baseline  %-60s %s\n", t, time.Since(start).Round(100*time.Millisecond))
				if failed || broken {
					fmt.Print(out)
					fatal(fmt.Sprintf("baseline fails (%v) before any mutation: %s", names, t))
				}
			}
		}
	}

	var results []Result
	for _, m := range sel {
		r := runMutant(g, root, m)
		results = append(results, r)
		fmt.Printf("%-4s %-13s %-7s %s  [%s]\n", m.ID, r.Outcome, r.Took.Round(100*time.Millisecond), m.Name, strings.Join(r.Caught, ", "))
	}

	// Nothing may be left mutated.
	out, err := exec.Command("git", append([]string{"diff", "--stat", "--"}, fileList...)...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate: git diff:", err)
	} else if len(bytes.TrimSpace(out)) > 0 {
		fatal("files differ from git after the run:\n" + string(out))
	}

	table := markdown(results)
	fmt.Println()
	fmt.Print(table)
	if *flagMD != "" {
		if err := writeMD(*flagMD, table); err != nil {
			fatal(err.Error())
		}
	}
	for _, r := range results {
		if r.Outcome != "KILLED" {
			os.Exit(1)
		}
	}
}

func runMutant(g *guard, root string, m *Mutant) (r Result) {
	r.M = m
	start := time.Now()
	defer func() { r.Took = time.Since(start) }()
	path := filepath.Join(root, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		fatal(err.Error())
	}
	if bytes.Count(src, []byte(m.Old)) != 1 {
		r.Outcome = "STALE"
		return r
	}
	mutated := bytes.Replace(src, []byte(m.Old), []byte(m.New), 1)
	if err := g.apply(path, mutated); err != nil {
		_ = g.restore()
		fatal(err.Error())
	}
	defer func() {
		if err := g.restore(); err != nil {
			fatal(err.Error())
		}
	}()
	r.Outcome = "SURVIVED"
	for _, t := range m.Tests {
		failed, broken, names, out := runTest(g, t, *flagTimeout)
		if broken {
			r.Outcome, r.Note = "BUILD-BROKEN", firstLines(out, 5)
			if *flagV {
				fmt.Print(out)
			}
			return r
		}
		if failed {
			r.Outcome = "KILLED"
			for _, n := range names {
				r.Caught = append(r.Caught, strings.TrimPrefix(t.Pkg, "./")+"."+n)
			}
			if *flagV {
				fmt.Print(out)
			}
			if !*flagAll {
				break
			}
		}
	}
	return r
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " / ")
}

func markdown(rs []Result) string {
	var b strings.Builder
	b.WriteString("| id | invariant | break (file) | test command | caught by | result | runtime |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		var cmds []string
		for _, t := range r.M.Tests {
			cmds = append(cmds, "`"+strings.ReplaceAll(t.String(), "|", `\|`)+"`")
		}
		caught := strings.Join(r.Caught, ", ")
		if r.Note != "" {
			caught += " " + r.Note
		}
		fmt.Fprintf(&b, "| %s | %s | %s (`%s`) | %s | %s | %s | %s |\n", r.M.ID, r.M.Invariant, r.M.Name, r.M.File,
			strings.Join(cmds, "<br>"), strings.ReplaceAll(caught, "|", `\|`), r.Outcome, r.Took.Round(100*time.Millisecond))
	}
	return b.String()
}

// writeMD replaces the text between the result markers of file (or writes
// the table alone when the markers are missing).
func writeMD(file, table string) error {
	const begin, end = "<!-- mutate:begin -->\n", "<!-- mutate:end -->"
	old, err := os.ReadFile(file)
	if err == nil {
		s := string(old)
		i, j := strings.Index(s, begin), strings.Index(s, end)
		if i >= 0 && j > i {
			stamp := fmt.Sprintf("Last run: %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
			return os.WriteFile(file, []byte(s[:i+len(begin)]+stamp+table+s[j:]), 0o644)
		}
	}
	return os.WriteFile(file, []byte(begin+table+end+"\n"), 0o644)
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "mutate:", msg)
	os.Exit(2)
}
