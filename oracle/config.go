package oracle

// config.go owns the network's configuration: defaults and validation.

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/backstream/backstream/oracle/world"
)

// Traffic modes accepted by Config.Traffic. TrafficNone runs no generator:
// events come only from Network.Emit.
const (
	TrafficBasic = string(world.TrafficBasic)
	TrafficFull  = string(world.TrafficFull)
	TrafficNone  = "none"
)

// Fault profiles accepted by Config.Faults.
const (
	ProfileNone    = "none"
	ProfileFlaky   = "flaky"
	ProfileHostile = "hostile"
)

// Defaults applied to zero fields of a Config.
const (
	DefaultListen           = "127.0.0.1:0"
	DefaultAccounts         = 1000
	DefaultRecordsMean      = 20
	DefaultHosts            = 4
	DefaultSeed             = 1
	DefaultRate             = 50
	DefaultSubscriberBuffer = 100_000
	DefaultWriteTimeout     = 30 * time.Second
)

// DevnetWebDIDs is how many of accounts the demo network makes did:web:
// one in a hundred.
func DevnetWebDIDs(accounts int) int { return accounts / 100 }

// Limits enforced by Config validation.
const (
	maxAccounts      = 10_000_000
	maxHosts         = 1000
	maxRate          = 1_000_000
	maxRecordsMean   = 1_000_000
	maxPreloadEvents = 100_000_000
)

// Config describes one simulated network. Zero fields take the defaults above
// (so Seed 0 means seed 1); negative values are errors.
type Config struct {
	Listen        string  // relay listen address; default 127.0.0.1:0
	Accounts      int     // number of accounts; default 1000
	RecordsMean   int     // mean records per account; default 20
	Hosts         int     // number of PDS hosts; default 4
	Seed          int64   // world, traffic and fault seed; default 1
	Rate          float64 // live events per second; default 50
	Events        int     // stop live traffic after this many events; 0 = never
	Traffic       string  // "full" (default), "basic" or "none"
	Faults        string  // fault profile: "none" (default), "flaky", "hostile"
	PreloadEvents int     // events generated before the listeners open, kept in the history
	// RelayIndexMissing is the fraction (0..1) of accounts the relay's own
	// listRepos leaves out, as a rebuilt relay index does; each PDS still
	// lists them (Network.RelayIndexOmits says which).
	RelayIndexMissing float64
	// SlowHost and SlowHostDelay: PDS host SlowHost answers every request
	// SlowHostDelay late (Faults.SlowHost); a zero delay is no slow host.
	SlowHost      int
	SlowHostDelay time.Duration
	// WebDIDs accounts (the last by index) are did:web (world.Config.WebDIDs);
	// the relay serves their documents at /.well-known/did.json by Host.
	// 0: none; DevnetWebDIDs is the demo's share.
	WebDIDs int

	Retention        int           // max events kept in the firehose history; 0 = unlimited
	SubscriberBuffer int           // live events a subscriber may lag before ConsumerTooSlow; default 100000
	WriteTimeout     time.Duration // per-batch websocket write deadline; default 30s
	Logger           *slog.Logger  // nil = discard
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Accounts == 0 {
		c.Accounts = DefaultAccounts
	}
	if c.RecordsMean == 0 {
		c.RecordsMean = DefaultRecordsMean
	}
	if c.Hosts == 0 {
		c.Hosts = DefaultHosts
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Traffic == "" {
		c.Traffic = TrafficFull
	}
	if c.Faults == "" {
		c.Faults = ProfileNone
	}
	if c.SubscriberBuffer == 0 {
		c.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first invalid field of c after defaults are applied,
// wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("oracle: config: %s=%v: %s: %w", field, v, why, ErrInvalidConfig)
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return bad("listen", c.Listen, "want host:port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return bad("listen", c.Listen, "port must be 0..65535")
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return bad("listen", c.Listen, "host must be an IP address or localhost")
	}
	switch {
	case c.Accounts < 0 || c.Accounts > maxAccounts:
		return bad("accounts", c.Accounts, fmt.Sprintf("must be 1..%d", maxAccounts))
	case c.WebDIDs < 0 || c.WebDIDs > c.Accounts:
		return bad("web_dids", c.WebDIDs, "must be 0..accounts")
	case c.RecordsMean < 0 || c.RecordsMean > maxRecordsMean:
		return bad("records", c.RecordsMean, fmt.Sprintf("must be 1..%d", maxRecordsMean))
	case c.Hosts < 0 || c.Hosts > maxHosts:
		return bad("hosts", c.Hosts, fmt.Sprintf("must be 1..%d", maxHosts))
	case c.Hosts > c.Accounts:
		return bad("hosts", c.Hosts, fmt.Sprintf("more hosts than accounts (%d)", c.Accounts))
	case c.Seed < 0:
		return bad("seed", c.Seed, "must not be negative")
	case c.Rate < 0 || c.Rate > maxRate || c.Rate != c.Rate:
		return bad("rate", c.Rate, fmt.Sprintf("must be in (0, %d]", maxRate))
	case c.Events < 0:
		return bad("events", c.Events, "must not be negative (0 = never stop)")
	case c.PreloadEvents < 0 || c.PreloadEvents > maxPreloadEvents:
		return bad("preload-events", c.PreloadEvents, fmt.Sprintf("must be 0..%d", maxPreloadEvents))
	case c.Retention < 0:
		return bad("retention", c.Retention, "must not be negative (0 = unlimited)")
	case c.SubscriberBuffer < 0:
		return bad("subscriber-buffer", c.SubscriberBuffer, "must not be negative")
	case c.WriteTimeout < 0:
		return bad("write-timeout", c.WriteTimeout, "must not be negative")
	case !(c.RelayIndexMissing >= 0 && c.RelayIndexMissing <= 1):
		return bad("relay-index-missing", c.RelayIndexMissing, "must be in [0, 1]")
	case c.SlowHostDelay < 0 || c.SlowHost < 0 || (c.SlowHostDelay > 0 && c.SlowHost >= c.Hosts):
		return bad("slow-host", c.SlowHost, fmt.Sprintf("want a host index below %d and a delay ≥ 0", c.Hosts))
	}
	switch c.Traffic {
	case TrafficBasic, TrafficFull, TrafficNone:
	default:
		return bad("traffic", c.Traffic, "want full, basic or none")
	}
	switch c.Faults {
	case ProfileNone, ProfileFlaky, ProfileHostile:
	default:
		return bad("faults", c.Faults, "want none, flaky or hostile")
	}
	if c.Traffic == TrafficNone && c.PreloadEvents > 0 {
		return bad("preload-events", c.PreloadEvents, "needs traffic basic or full")
	}
	if c.Retention > 0 && c.PreloadEvents > c.Retention {
		return bad("preload-events", c.PreloadEvents, fmt.Sprintf("exceeds retention %d", c.Retention))
	}
	return nil
}
