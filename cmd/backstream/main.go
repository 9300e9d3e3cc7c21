// Command backstream archives a whole atproto network and streams it.
//
// Subcommands:
//
//	serve   bootstrap from a relay, then archive its firehose and serve clients
//	status  print the state of a data dir that no process holds open
//	checkpoint  write a consistent copy of the store to a new data dir (online backup)
//	devnet  run a simulated atproto network (relay, PDS hosts, firehose) for tests and demos
//	tail    print the events a backstream (or Jetstream) /subscribe sends, one JSON line each
//	compaction reset  the recovery of a halted compaction: delete an interrupted pass's intent, a malformed
//	                  watermark, and an index with a malformed marker (rebuilt at the next start; --reindex forces it)
//
// Every flag has a BACKSTREAM_* environment variable (--backfill-workers is
// BACKSTREAM_BACKFILL_WORKERS); a flag on the command line wins over the
// environment. An unknown BACKSTREAM_* variable is an error naming the
// nearest flag, except BACKSTREAM_CRASHPOINT (test-only: a binary built
// with -tags crashpoint fires it, see docs/crashpoints.md; a release build
// refuses to start with it set) and Kubernetes service links (BACKSTREAM_SERVICE_*,
// BACKSTREAM_PORT*).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/backstream/backstream/archive"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its flags and what it does once they are parsed.
type command struct {
	name    string
	summary string
	flags   func(*flagSet) // defines the command's own flags
	run     func(ctx context.Context, env *cmdEnv) error
}

// cmdEnv is what a running subcommand gets: its parsed flags, output streams
// and logger.
type cmdEnv struct {
	fs     *flagSet
	stdout io.Writer
	stderr io.Writer
	log    *logger
}

// commands lists every subcommand. A subcommand exists only once it does
// something.
func commands() []*command {
	return []*command{serveCommand(), statusCommand(), checkpointCommand(), devnetCommand(), tailCommand(), compactionResetCommand()}
}

// errUsage marks command-line mistakes: exit status 2 and a usage hint.
var errUsage = errors.New("usage")

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var cmd *command
	rest := args[1:]
	for _, c := range cmds {
		switch {
		case c.name == args[0]:
			cmd = c
		case len(args) > 1 && c.name == args[0]+" "+args[1]: // a two-word command
			cmd, rest = c, args[2:]
		}
	}
	if cmd == nil {
		var begun []string // the two-word commands args[0] begins
		for _, c := range cmds {
			if first, _, two := strings.Cut(c.name, " "); two && first == args[0] {
				begun = append(begun, "backstream "+c.name)
			}
		}
		if len(begun) > 0 {
			fmt.Fprintf(stderr, "backstream: %q needs one more word: %s\n", args[0], strings.Join(begun, ", "))
		} else {
			fmt.Fprintf(stderr, "backstream: unknown command %q\n", args[0])
		}
		usage(stderr, cmds)
		return 2
	}
	fs, err := parseFlags(cmd, cmds, rest, environ, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err == nil {
		err = checkDataDir(fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "backstream %s: %v\n", cmd.name, err)
		return 2
	}
	log, err := newLogger(fs, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "backstream %s: %v\n", cmd.name, err)
		return 2
	}
	env := &cmdEnv{fs: fs, stdout: stdout, stderr: stderr, log: log}
	if err := cmd.run(ctx, env); err != nil {
		return failed(cmd.name, err, log, stderr)
	}
	return 0
}

// checkDataDir refuses a --data-dir that is itself a Pebble store
// directory (a data dir's store/, or a checkpoint's DIR/store), for every
// command that has the flag: opening it would create store/ and scratch/
// inside it and start a new archive there.
func checkDataDir(fs *flagSet) error {
	f := fs.Lookup("data-dir")
	if f == nil {
		return nil
	}
	dir := f.Value.String()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // missing or unreadable: the command says so when it opens it
	}
	for _, e := range entries {
		if name := e.Name(); name == "CURRENT" || strings.HasPrefix(name, "MANIFEST-") {
			return fmt.Errorf("--data-dir %q: this looks like a store directory (it holds Pebble's %s); pass its parent", dir, name)
		}
	}
	return nil
}

// failed reports a command's error and returns the exit status: 2 for a
// usage error and for a fatal store error (Pebble cannot go on after one;
// the message names the data dir and what to do), 1 for any other failure.
func failed(name string, err error, log *logger, stderr io.Writer) int {
	var fatal *archive.FatalError
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "backstream %s: %v\n", name, err)
		return 2
	case errors.As(err, &fatal):
		log.Error("backstream "+name+" stopped on a fatal store error", "err", err)
		return 2
	}
	log.Error("backstream "+name+" failed", "err", err)
	return 1
}

func usage(w io.Writer, cmds []*command) {
	fmt.Fprintln(w, "usage: backstream <command> [flags]")
	fmt.Fprintln(w)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'backstream <command> -h' for its flags. Every flag can also be set as")
	fmt.Fprintln(w, "BACKSTREAM_<FLAG_NAME> in the environment (the command line wins).")
}
