package main

// This file wires `backstream devnet`: the simulated atproto network of
// package oracle as a process, for demos, benchmarks and process-level tests.

import (
	"context"
	"fmt"
	"time"

	"github.com/backstream/backstream/oracle"
)

func devnetCommand() *command {
	return &command{
		name:    "devnet",
		summary: "run a simulated atproto network (relay, PDS hosts, firehose) on loopback",
		flags: func(fs *flagSet) {
			fs.String("listen", "127.0.0.1:7777", "relay listen address (PDS hosts listen on its port at 127.0.0.2 onwards, or on its listener when it listens on every address)")
			fs.Int("accounts", oracle.DefaultAccounts, "number of accounts (at least 1)")
			fs.Int("records", oracle.DefaultRecordsMean, "mean records per account (at least 1)")
			fs.Int("hosts", oracle.DefaultHosts, "number of PDS hosts (at least 1)")
			fs.Int("web-dids", -1, "accounts that are did:web (their documents served by the relay at /.well-known/did.json by Host); -1: one in a hundred")
			fs.Int64("seed", oracle.DefaultSeed, "seed of the world, its traffic and its faults")
			fs.Float64("rate", oracle.DefaultRate, "live events per second (0 = no live traffic, as --traffic none)")
			fs.Int("events", 0, "stop live traffic after this many events (0 = never)")
			fs.String("traffic", oracle.TrafficFull, "traffic: full, basic or none")
			fs.String("faults", oracle.ProfileNone, "fault profile: none, flaky or hostile")
			fs.Int("preload-events", 0, "generate this many live events before opening, kept in the firehose history")
			fs.Float64("relay-index-missing", 0, "fraction of accounts (0..1) the relay's listRepos leaves out; each PDS still lists them")
			fs.Int("slow-host", 0, "index of the PDS host that --slow-host-delay slows")
			fs.Duration("slow-host-delay", 0, "delay before every answer of --slow-host (0 = no slow host)")
		},
		run: runDevnet,
	}
}

func runDevnet(ctx context.Context, env *cmdEnv) error {
	cfg, err := devnetConfig(env.fs)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	cfg.Logger = env.log
	env.log.Info("building the simulated network", "accounts", cfg.Accounts, "records", cfg.RecordsMean, "hosts", cfg.Hosts, "seed", cfg.Seed)
	return oracle.Run(ctx, cfg, env.stdout)
}

// devnetConfig is the network devnet's flags describe. The oracle takes a
// zero count as its default, so a 0 the operator typed is refused here;
// --rate 0 means no live traffic (--traffic none).
func devnetConfig(fs *flagSet) (oracle.Config, error) {
	cfg := oracle.Config{
		Listen:            fs.str("listen"),
		Accounts:          fs.get("accounts").(int),
		RecordsMean:       fs.get("records").(int),
		Hosts:             fs.get("hosts").(int),
		Seed:              fs.get("seed").(int64),
		Rate:              fs.get("rate").(float64),
		Events:            fs.get("events").(int),
		Traffic:           fs.str("traffic"),
		Faults:            fs.str("faults"),
		PreloadEvents:     fs.get("preload-events").(int),
		RelayIndexMissing: fs.get("relay-index-missing").(float64),
		SlowHost:          fs.get("slow-host").(int),
		SlowHostDelay:     fs.get("slow-host-delay").(time.Duration),
		WebDIDs:           fs.get("web-dids").(int),
	}
	for _, f := range []string{"accounts", "records", "hosts"} {
		if fs.get(f).(int) < 1 {
			return cfg, fmt.Errorf("--%s %q: must be at least 1", f, fs.str(f))
		}
	}
	if cfg.Rate == 0 {
		if cfg.PreloadEvents > 0 {
			return cfg, fmt.Errorf("--rate 0 (no live traffic) and --preload-events %d: preloading needs traffic", cfg.PreloadEvents)
		}
		cfg.Traffic = oracle.TrafficNone
	}
	if cfg.WebDIDs < 0 {
		cfg.WebDIDs = oracle.DevnetWebDIDs(cfg.Accounts)
	}
	return cfg, cfg.Validate()
}
