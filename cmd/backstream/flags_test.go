package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
)

func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEnvNames(t *testing.T) {
	if got := envName("backfill-workers"); got != "BACKSTREAM_BACKFILL_WORKERS" {
		t.Fatal(got)
	}
}

func TestEnvSetsFlagsCommandLineWins(t *testing.T) {
	cmds := commands()
	var status *command
	for _, c := range cmds {
		if c.name == "status" {
			status = c
		}
	}
	fs, err := parseFlags(status, cmds, nil, []string{"BACKSTREAM_DATA_DIR=/from/env", "BACKSTREAM_JSON=true"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if fs.str("data-dir") != "/from/env" || !fs.get("json").(bool) {
		t.Fatalf("env not applied: %s %v", fs.str("data-dir"), fs.get("json"))
	}
	fs, err = parseFlags(status, cmds, []string{"--data-dir", "/from/flag"}, []string{"BACKSTREAM_DATA_DIR=/from/env"}, &bytes.Buffer{})
	if err != nil || fs.str("data-dir") != "/from/flag" {
		t.Fatalf("command line did not win: %v %s", err, fs.str("data-dir"))
	}
	// A flag of another subcommand is known, just not applied here.
	if _, err := parseFlags(status, cmds, nil, []string{"BACKSTREAM_ACCOUNTS=5"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("another command's variable refused: %v", err)
	}
}

func TestUnknownEnvNamesNearestFlag(t *testing.T) {
	code, _, stderr := runCLI(t, []string{"BACKSTREAM_DATA_DIRR=/x"}, "status")
	if code != 2 || !strings.Contains(stderr, "BACKSTREAM_DATA_DIRR") || !strings.Contains(stderr, "--data-dir") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	// Documented exceptions are never errors.
	for _, v := range []string{"BACKSTREAM_CRASHPOINT=x", "BACKSTREAM_SERVICE_HOST=10.0.0.1", "BACKSTREAM_PORT=tcp://10.0.0.1:6008", "BACKSTREAM_PORT_6008_TCP_ADDR=10.0.0.1", "OTHER_THING=1"} {
		if _, err := parseFlags(statusCommand(), commands(), nil, []string{v}, &bytes.Buffer{}); err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"BACKSTREAM_JSON=maybe"}, []string{"status"}, "BACKSTREAM_JSON"},
		{nil, []string{"status", "--log-level", "loud"}, "--log-level"},
		{nil, []string{"status", "--log-format", "xml"}, "--log-format"},
		{nil, []string{"status", "stray"}, "unexpected argument"},
		{nil, []string{"nosuch"}, "unknown command"},
		{nil, []string{"devnet", "--accounts", "-5"}, "accounts"},
		{nil, []string{"devnet", "--faults", "spicy"}, "faults"},
	} {
		code, _, stderr := runCLI(t, tc.env, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v %v: code %d, stderr %q (want %q)", tc.env, tc.args, code, stderr, tc.want)
		}
	}
}

// TestTwoWordCommandHalf: the first word of a two-word command alone, or
// with a word that completes none, is refused naming the commands it
// begins ("compaction reset"), not as a command that does not exist: the
// usage lists "compaction reset", and an operator who typed "compaction"
// is one word short.
func TestTwoWordCommandHalf(t *testing.T) {
	for _, args := range [][]string{{"compaction"}, {"compaction", "--data-dir", "x"}, {"compaction", "rest"}, {"compaction", "-h"}} {
		code, _, stderr := runCLI(t, nil, args...)
		if want := `backstream: "compaction" needs one more word: backstream compaction reset`; code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", args, code, stderr, want)
		}
	}
}

// TestFloatFlagsFinite: NaN and ±Inf, which strconv accepts and range
// checks let through, are refused in every float flag, from the command
// line or the environment, naming the flag.
func TestFloatFlagsFinite(t *testing.T) {
	byName := map[string]*command{}
	for _, c := range commands() {
		byName[c.name] = c
	}
	for _, tc := range []struct {
		cmd  string
		env  []string
		args []string
		want string
	}{
		{"serve", nil, []string{"--replay-duty", "NaN"}, `--replay-duty "NaN"`},
		{"serve", nil, []string{"--subscriber-message-rate", "NaN"}, `--subscriber-message-rate "NaN"`},
		{"serve", []string{"BACKSTREAM_SUBSCRIBER_MESSAGE_RATE=+Inf"}, nil, `--subscriber-message-rate "+Inf"`},
		{"serve", nil, []string{"--devnet-rate", "-Inf"}, `--devnet-rate "-Inf"`},
		{"devnet", nil, []string{"--rate", "inf"}, `--rate "+Inf"`},
		{"devnet", nil, []string{"--relay-index-missing", "nan"}, `--relay-index-missing "NaN"`},
	} {
		_, err := parseFlags(byName[tc.cmd], commands(), tc.args, tc.env, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v %v: %v, want an error saying %q", tc.cmd, tc.env, tc.args, err, tc.want)
		}
	}
	// The exit status of such an error is 2 (a devnet that would refuse the
	// value later anyway, so a regression cannot start anything).
	if code, _, stderr := runCLI(t, nil, "devnet", "--rate", "NaN"); code != 2 || !strings.Contains(stderr, "--rate") {
		t.Errorf("devnet --rate NaN: code %d, %q", code, stderr)
	}
}

// TestDevnetFlags: a zero count, which the oracle would take as its
// default, is refused naming the flag; --rate 0 is no live traffic.
func TestDevnetFlags(t *testing.T) {
	cfgOf := func(args ...string) (oracle.Config, error) {
		fs, err := parseFlags(devnetCommand(), commands(), args, nil, &bytes.Buffer{})
		if err != nil {
			return oracle.Config{}, err
		}
		return devnetConfig(fs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--accounts", "0"}, `--accounts "0"`},
		{[]string{"--accounts", "-5"}, `--accounts "-5"`},
		{[]string{"--records", "0"}, `--records "0"`},
		{[]string{"--hosts", "0"}, `--hosts "0"`},
		{[]string{"--rate", "0", "--preload-events", "5"}, "--rate 0"},
		{[]string{"--rate", "-1"}, "rate"},
	} {
		if _, err := cfgOf(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	c, err := cfgOf("--rate", "0")
	if err != nil || c.Traffic != oracle.TrafficNone {
		t.Errorf("--rate 0: traffic %q, %v; want none", c.Traffic, err)
	}
	c, err = cfgOf("--accounts", "10", "--hosts", "2", "--records", "3")
	if err != nil || c.Accounts != 10 || c.Hosts != 2 || c.RecordsMean != 3 || c.Traffic != oracle.TrafficFull || c.Rate != oracle.DefaultRate {
		t.Errorf("set: %+v, %v", c, err)
	}
}

func TestStatusJSON(t *testing.T) {
	dir := t.TempDir()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	code, out, stderr := runCLI(t, nil, "status", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	var r struct {
		Phase   string           `json:"phase"`
		Repos   map[string]int64 `json:"repos"`
		Archive struct {
			TipSeq *uint64 `json:"tip_seq"`
		} `json:"archive"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Phase != "bootstrap" || r.Archive.TipSeq == nil || len(r.Repos) < 5 {
		t.Fatalf("report %+v", r)
	}
	for _, k := range []string{"not_started", "pending", "complete", "failed", "unavailable"} {
		if _, ok := r.Repos[k]; !ok {
			t.Errorf("repos lacks %q", k)
		}
	}
	// A store held by another process is named as such.
	s, _ = archive.Open(dir, archive.Options{})
	defer s.Close()
	code, _, stderr = runCLI(t, nil, "status", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, "another backstream") {
		t.Fatalf("held store: code %d, %q", code, stderr)
	}
}

// TestLogDurations: a time.Duration attribute reads the same in both log
// formats, as a Go duration string ("1.5s"), not JSON's integer
// nanoseconds: one attribute of a record, one given With, one in a group.
func TestLogDurations(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			cmds := commands()
			fs, err := parseFlags(statusCommand(), cmds, []string{"--log-format", format}, nil, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			log, err := newLogger(fs, &out)
			if err != nil {
				t.Fatal(err)
			}
			log.With("bound", time.Minute).Info("checkpoint written", "took", 1500*time.Millisecond,
				slog.Group("pass", "wait", 250*time.Microsecond))
			line := out.String()
			var want []string
			if format == "json" {
				want = []string{`"took":"1.5s"`, `"bound":"1m0s"`, `"pass":{"wait":"250µs"}`}
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("not one JSON line: %v: %s", err, line)
				}
			} else {
				want = []string{"took=1.5s", "bound=1m0s", "pass.wait=250µs"}
			}
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("%s log line lacks %s: %s", format, w, line)
				}
			}
		})
	}
}
