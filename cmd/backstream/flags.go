package main

// This file owns flag and environment handling shared by every subcommand:
// each flag has a BACKSTREAM_* variable, unknown BACKSTREAM_* variables are
// refused with the nearest flag named, and the logging flags.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
)

// envPrefix starts every backstream environment variable.
const envPrefix = "BACKSTREAM_"

// envCrashpoint is the one documented non-flag variable (test-only).
const envCrashpoint = "BACKSTREAM_CRASHPOINT"

// flagSet is a subcommand's flags plus where each value came from.
type flagSet struct {
	*flag.FlagSet
	fromEnv map[string]string // flag name → variable that set it
	typed   map[string]bool   // flags the command line set (over the environment's, if both did)
}

var errHelp = errors.New("help requested")

// envName is the variable of a flag: --backfill-workers → BACKSTREAM_BACKFILL_WORKERS.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func newFlagSet(cmd *command, out io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("backstream "+cmd.name, flag.ContinueOnError), fromEnv: map[string]string{}}
	fs.SetOutput(out)
	fs.String("log-format", "", "log format: text or json (default: text on a terminal, json otherwise)")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: backstream %s [flags]\n\n%s\n\nflags (each also settable as the environment variable shown):\n", cmd.name, cmd.summary)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(out, "  --%s  [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
		})
	}
	return fs
}

// parseFlags applies the environment, then the command line, to cmd's flags.
func parseFlags(cmd *command, all []*command, args, environ []string, out io.Writer) (*flagSet, error) {
	fs := newFlagSet(cmd, out)
	known := map[string]bool{}
	var names []string
	for _, c := range all {
		newFlagSet(c, io.Discard).VisitAll(func(f *flag.Flag) {
			if !known[envName(f.Name)] {
				known[envName(f.Name)] = true
				names = append(names, f.Name)
			}
		})
	}
	sort.Strings(names)
	for _, kv := range environ {
		key, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(key, envPrefix) || ignoredEnv(key) {
			continue
		}
		if !known[key] {
			return nil, fmt.Errorf("unknown environment variable %s (did you mean %s, i.e. --%s?)",
				key, envName(nearest(key, names)), nearest(key, names))
		}
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, envPrefix), "_", "-"))
		if fs.Lookup(name) == nil {
			continue // a flag of another subcommand: valid, not ours
		}
		if err := fs.Set(name, val); err != nil {
			return nil, fmt.Errorf("%s=%q: %v", key, val, err)
		}
		fs.fromEnv[name] = key
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	// Which flags the arguments set: a flag set by the environment is set
	// already, so the arguments alone are parsed again (they parsed above).
	typed := newFlagSet(cmd, io.Discard)
	if err := typed.Parse(args); err != nil {
		return nil, err
	}
	fs.typed = map[string]bool{}
	typed.Visit(func(f *flag.Flag) { fs.typed[f.Name] = true })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if err := finiteFloats(fs); err != nil {
		return nil, err
	}
	return fs, nil
}

// finiteFloats refuses NaN and ±Inf in every float flag: strconv accepts
// them, and every comparison with NaN is false, so a range check would let
// it through.
func finiteFloats(fs *flagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(flag.Getter).Get().(float64); ok && err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			err = fmt.Errorf("--%s %q: want a finite number", f.Name, f.Value.String())
		}
	})
	return err
}

// ignoredEnv lists BACKSTREAM_* variables that are not flags: the crash
// point and the service links Kubernetes injects for a service named
// "backstream".
func ignoredEnv(key string) bool {
	return key == envCrashpoint ||
		strings.HasPrefix(key, envPrefix+"SERVICE_") ||
		strings.HasPrefix(key, envPrefix+"PORT")
}

// nearest returns the flag whose variable is closest to key.
func nearest(key string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := levenshtein(key, envName(n)); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (fs *flagSet) str(name string) string { return fs.Lookup(name).Value.String() }

func (fs *flagSet) get(name string) any { return fs.Lookup(name).Value.(flag.Getter).Get() }

// logger is the process logger (one per run, passed down, never global).
type logger = slog.Logger

func newLogger(fs *flagSet, stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(fs.str("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", fs.str("log-level"))
	}
	format := fs.str("log-format")
	if format == "" {
		format = "json"
		if f, ok := stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// durationString writes a time.Duration attribute as the text format does,
// a Go duration string ("1.5s"), in both formats: JSON's own encoding is an
// integer of nanoseconds, which no operator reads or greps as a time.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
