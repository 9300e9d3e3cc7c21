package main

// This file owns `backstream serve`: its flags, answering /status (and
// /metrics on the admin listener) from the first second, and running the node (package node: the
// store, the relay check, every component and the lifecycle) until a signal
// or a fatal error.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/lifecycle"
	"github.com/backstream/backstream/natssink"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/subscribe"
	"github.com/backstream/backstream/upstream"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func serveCommand() *command {
	return &command{
		name:    "serve",
		summary: "bootstrap from a relay, then archive its firehose and serve clients",
		flags: func(fs *flagSet) {
			fs.String("relay", "https://relay1.us-east.bsky.network", "relay URL: http(s)://host[:port], without a path")
			fs.String("data-dir", "./data", "data directory (holds store/ and scratch/)")
			fs.String("listen", ":6008", "public HTTP listen address, host:port or :port: /subscribe, /status, /healthz, /readyz, /zstd-dictionary")
			fs.String("admin-listen", DefaultAdminListen, "admin HTTP listen address: /metrics, /debug/pprof/, POST /admin/checkpoint, the probes and /status (empty disables it; keep it off the public network)")
			fs.String("backup-dir", "", "directory under which POST /admin/checkpoint may write checkpoints (empty: checkpoints through a running serve are refused)")
			fs.Duration("checkpoint-interval", DefaultCheckpointInterval, "least time between the end of one checkpoint through the admin endpoint and the start of the next")
			fs.Int("max-conns", 0, "cap on open connections to --listen, beyond which a new one gets 503 (0 = RLIMIT_NOFILE minus the reserve for the store and downloads)")
			fs.Int("max-conns-per-ip", DefaultMaxConnsPerIP, "cap on open connections to --listen from one client address (IPv6: per /64), beyond which a new one gets 429 (0 = none; behind a reverse proxy every client has the proxy's address)")
			fs.Duration("http-idle-timeout", DefaultHTTPIdleTimeout, "close a keep-alive HTTP connection idle this long")
			fs.Duration("http-read-timeout", DefaultHTTPReadTimeout, "deadline for reading an HTTP request, body included (not a websocket: a subscriber's connection has none)")
			fs.Int("backfill-workers", bootstrap.DefaultWorkers, "concurrent backfill jobs, i.e. concurrent getRepo requests")
			fs.Int("enumeration-window", bootstrap.DefaultWindow, "repos listRepos enumeration may run ahead of the durable checkpoint (hosts mode: all hosts together, each host at most its share, at least a page)")
			fs.String("repos", "", "debug: backfill exactly these DIDs (comma-separated), in order; no enumeration, no discovery")
			fs.Int("max-repos", 0, "debug: stop enumeration after this many repos; no resumable cursor, no discovery (0 = no limit)")
			fs.String("backfill-memory", "auto", "memory budget for CARs being verified and emitted, e.g. 2GiB (auto: a quarter of available memory)")
			fs.Duration("getrepo-timeout", backfill.DefaultAttemptTimeout, "deadline of one getRepo attempt, download and verification")
			fs.String("scratch-budget", "auto", "disk budget of every getRepo body spilled to scratch at once, e.g. 20GiB (auto: half the scratch volume's free space above its floor, at least 64MiB and at most 64GiB)")
			fs.Int("backfill-host-workers", bootstrap.DefaultHostWorkers, "concurrent getRepo downloads per PDS host: with --enumerate hosts the scheduler hands a host no more jobs; with relay (final host after the redirect) more fail fast and retry later")
			fs.Int("backfill-host-retries", bootstrap.DefaultHostRetries, "with --enumerate hosts: times a host whose listRepos is cut is listed again in the same bootstrap, from where it was cut, after 5 s doubling to 5 min; then it is left failing for discovery; 0: none")
			fs.String("enumerate", "", "bootstrap enumeration: hosts (list every host of the relay's listHosts roster but banned ones on the host itself, idle, offline and throttled ones too, and download from it), relay (the relay's listRepos and redirect; discovery and the repair passes list the relay too, whatever roster an earlier hosts-mode run recorded); empty: hosts when the relay answers listHosts with an accountCount for some host it lists, else relay")
			fs.String("getrepo-min-body", "auto", "slowest getRepo body accepted, in bytes per 20 s window, e.g. 64KiB (auto: 64KiB); slower bodies are cut and retried")
			fs.Bool("reset-relay-cursor", false, "follow --relay from its live tip, accepting a gap in the archive, when the store follows another relay (its cursor is dropped) or has lost its relay record or its cursor/relay")
			fs.String("loopback-hosts", "", "with a relay on loopback: other loopback host:port (comma-separated) a getRepo redirect may reach, e.g. local PDS hosts; otherwise only the relay's own port")
			fs.Int("retry-workers", 16, "concurrent whole-repo replacements in steady state")
			fs.Int("retry-host-workers", 4, "concurrent replacements per PDS host (final host after redirects)")
			fs.Duration("retry-interval", time.Minute, "first retry delay of a failed repo (doubles per failure, jittered)")
			fs.Duration("retry-max-delay", 24*time.Hour, "longest retry delay of a failed repo")
			fs.Duration("retry-scan-period", retry.DefaultScanPeriod, "pause between two passes of the retry runner over the store's due repos when nothing asks for one sooner; such a pass, like one woken by a #sync or #account effect, reads only what came due since the last pass, and every repo due only at a park's end, after a repo was deferred for the record index, or once the jobs finished since the last such pass pay for it (2 keys a job); a host whose queue share was full is read on from where it was left when its share drains")
			fs.Bool("devnet", false, "demo mode: run a simulated atproto network in-process on --devnet-listen and follow it (ignores --relay)")
			fs.String("devnet-listen", "127.0.0.1:7777", "with --devnet: the simulated relay's listen address")
			fs.Int("devnet-accounts", 3000, "with --devnet: accounts in the simulated network (at least 1)")
			fs.Float64("devnet-rate", 50, "with --devnet: live events per second (0 = no live traffic: bootstrap then waits --capture-wait for a first event)")
			fs.Duration("capture-wait", lifecycle.DefaultCaptureWait, "how long bootstrap waits for the firehose's first durable event before starting anyway (must be positive)")
			fs.String("min-free", "auto", "free-space floor of the data dir's volume, e.g. 2GiB: below it ingest stops and the process exits (auto: the smaller of 1 GiB and 2% of the volume; off or 0: no floor)")
			fs.Duration("max-write-stall", archive.DefaultMaxWriteStall, "longest store write stall, or one store read or write not returning, before the process stops (a full or failing disk)")
			fs.Duration("subscriber-stall-timeout", subscribe.DefaultStallTimeout, "close a subscriber whose socket write has not completed for this long (it does not read), whatever its lag")
			fs.Duration("subscriber-hello-timeout", subscribe.DefaultHelloTimeout, "close a requireHello subscriber that sends no options_update within this long")
			fs.String("subscriber-buffer-budget", "1GiB", "bytes of output buffers and filters all subscribers may reserve together (each reserves 128 KiB, so at least that, and its filter's estimate, about 1.3 MiB for 10,000 did:plc DIDs); beyond, new subscribers get 503 and an options_update that grows a filter closes its connection")
			fs.Int("max-subscribers", subscribe.DefaultMaxSubscribers, "connected subscribers at most; beyond, 503")
			fs.Int("max-subscribers-per-ip", subscribe.DefaultMaxSubscribersPerIP, "connected subscribers per client IP at most; beyond, 429")
			fs.Bool("trust-x-forwarded-for", false, "count subscribers per the last X-Forwarded-For address (only behind a reverse proxy that appends it) instead of the connection's address")
			fs.Int("replay-readers", 0, "subscribers replaying at once (from the archive, or catching up through the live log), each a bounded batch per turn (0 = half the CPUs)")
			fs.Float64("replay-duty", subscribe.DefaultReplayDuty, "share of the time (0 < d ≤ 1) a replay reader may be busy, so of a CPU it may take; 1 = replay at full speed")
			fs.Bool("scan-replays", false, "every replay from the archive scans ev/: the replay planner, which reads a selective wantedCollections or wantedDids replay from the replay index, is off")
			fs.Float64("subscriber-message-rate", subscribe.DefaultMessageRate, "client messages (options_update, pings) per second per connection; beyond the burst, the connection is closed")
			fs.Int("subscriber-message-burst", subscribe.DefaultMessageBurst, "client messages a connection may send at once")
			fs.Duration("compaction-interval", node.DefaultCompactionInterval, "time between the end of one compaction pass (the physical removal of deleted and superseded records) and the start of the next (0 = no periodic passes)")
			fs.Int64("compaction-tombstones", node.DefaultCompactionTombstones, "start a compaction pass early once this many deletes, updates, resets and account deletions or takedowns are pending (0 = never early)")
			fs.String("compaction-max-account-batch", "1GiB", "bytes of one account's compaction removal batch at most (its whole removal is one batch; a pass holds about twice it in memory); an account whose removal is larger halts compaction (at most "+strconv.Itoa(archive.MaxCompactAccountBatch>>20)+"MiB; auto = 1GiB)")
			fs.String("verify", "strict", "identity verification of every downloaded repo and live commit: strict (drop or fail what does not verify), warn (archive it, counted), off (resolve nothing: only for a relay that already verifies)")
			fs.String("plc", "auto", "PLC directory URL for did:plc resolution (auto: "+ident.DefaultPLC+", or the relay's own URL when the relay is on loopback, as the simulated network serves DID documents; it then answers did:web documents and handle resolution too)")
			fs.Bool("plc-export", true, "during bootstrap, read the PLC directory's export (GET /export, its whole operation log, paged) beside the downloads and keep each did:plc's identity (memory and ident/ rows), so most repos need no DID request; resumes from cursor/plcexport; a directory that does not answer it falls back to one request per DID (off: always one per DID; never with --repos or --max-repos)")
			fs.Duration("ident-timeout", ident.DefaultTimeout, "deadline of one DID document request")
			fs.Int("ident-concurrency", ident.DefaultConcurrency, "DID resolutions in flight at most; more wait (backstream_ident_limited_total). Resolutions per second are at most this over the directory's latency")
			fs.String("ident-rate", "auto", "requests per second to the PLC directory at most, retries included (0 = no limit; auto: "+strconv.Itoa(ident.DefaultRate)+" for "+ident.DefaultPLC+", no limit for any other directory, e.g. a mirror or the simulated network); more wait (backstream_ident_rate_limited_total)")
			fs.Int("ident-retries", ident.DefaultRetries, "retries of a failed DID document request before the DID counts as unresolvable (failure class identity)")
			fs.Int("ident-cache-size", ident.DefaultCacheSize, "DID documents kept in memory (least recently used evicted)")
			fs.Duration("ident-ttl", ident.DefaultTTL, "how long a resolved DID document is trusted, in memory and in the store's ident/ rows")
			fs.Duration("handle-timeout", ident.DefaultHandleTimeout, "deadline of an #identity's handle check (DNS TXT, then https://<handle>/.well-known/atproto-did; one attempt): live frames of every account wait behind it; past it the handle is archived as handle.invalid (backstream_ident_handles_total{result=\"timeout\"})")
			fs.Duration("handle-ttl", ident.DefaultHandleTTL, "how long a handle check's result for a (DID, handle) pair is reused: a repeated #identity naming the same pair within it sends no request (backstream_ident_handle_cache_hits_total)")
			fs.Duration("uninverted-refetch-interval", firehose.DefaultUninvertedInterval, "least time from an account's last completed snapshot to the whole-repo replacement that a live commit which cannot be inverted (no prevData: a PDS without sync 1.1, or a relay hiding a delete) schedules: an account whose PDS sends only such commits costs one download per interval, and a delete a relay hid stays archived at most about this long (backstream_firehose_anomalies_total{kind=\"uninverted\"}; not with --verify off; must be positive)")
			fs.Int("verify-workers", 0, "live #commit and #sync checks computed at once (0 = one per CPU; a check waiting for the network holds none); an account's frames are checked in order, and archived in the relay's order")
			healFlags(fs)
			fs.String("nats-url", "", "publish every archived event, in seq order and once, into a NATS JetStream stream on these servers (comma-separated nats:// URLs, or tls://, ws://, wss://; empty: no NATS sink)")
			fs.String("nats-stream", natssink.DefaultStream, "with --nats-url: the stream's name, also its subjects' prefix (<stream>.commit.<collection>, <stream>.<kind>)")
			fs.Int("nats-replicas", 0, "with --nats-url: replicas of the stream when the sink creates it, 0 to 5 (0: 3 when the cluster shows at least 3 servers, else 1)")
			fs.String("nats-creds", "", "with --nats-url: NATS credentials file")
			fs.Int("nats-from", 0, "with --nats-url: archive seq an empty stream starts from (0: the whole archive)")
			fs.Int("nats-window", natssink.DefaultWindow, "with --nats-url: publishes awaiting the stream's acknowledgement at most")
		},
		run: runServe,
	}
}

// serveOptions are serve's validated flags.
type serveOptions struct {
	relay, dataDir, listen string
	workers, window        int
	repos                  []string
	maxRepos               int
	memory                 int64
	scratchBudget          int64
	hostWorkers            int
	hostRetries            int
	enumerate              string
	minBody                int64
	getRepoTimeout         time.Duration
	resetRelay             bool
	plcExport              bool // node.Config.PLCExport
	loopbackHosts          []string
	captureWait            time.Duration
	retryWorkers           int
	retryHostWorkers       int
	retryInterval          time.Duration
	retryMaxDelay          time.Duration
	retryScanPeriod        time.Duration
	http                   httpOptions
	backupDir              string
	checkpointInterval     time.Duration
	minFree                int64 // node.Config.MinFree: 0 auto, -1 off
	maxWriteStall          time.Duration
	subscribers            subscribe.Config // the subscriber limits; the rest is filled in by runServe
	compactionInterval     time.Duration    // node.Config's: negative off
	compactionTombstones   int64            // node.Config's: negative off
	compactionMaxBatch     int64            // node.Config.CompactionMaxAccountBatch: 0 default
	verify                 *ident.Config    // nil: --verify=off; PLC "auto" is resolved by nodeConfig
	uninvertedInterval     time.Duration    // node.Config.UninvertedInterval
	heal                   healOptions
	nats                   *natssink.Config // nil: no NATS sink
}

func serveOptionsFrom(fs *flagSet) (serveOptions, error) {
	o := serveOptions{
		relay:            fs.str("relay"),
		dataDir:          fs.str("data-dir"),
		listen:           fs.str("listen"),
		workers:          fs.get("backfill-workers").(int),
		window:           fs.get("enumeration-window").(int),
		maxRepos:         fs.get("max-repos").(int),
		getRepoTimeout:   fs.get("getrepo-timeout").(time.Duration),
		hostWorkers:      fs.get("backfill-host-workers").(int),
		hostRetries:      fs.get("backfill-host-retries").(int),
		enumerate:        fs.str("enumerate"),
		resetRelay:       fs.get("reset-relay-cursor").(bool),
		plcExport:        fs.get("plc-export").(bool),
		captureWait:      fs.get("capture-wait").(time.Duration),
		retryWorkers:     fs.get("retry-workers").(int),
		retryHostWorkers: fs.get("retry-host-workers").(int),
		retryInterval:    fs.get("retry-interval").(time.Duration),
		retryMaxDelay:    fs.get("retry-max-delay").(time.Duration),
		retryScanPeriod:  fs.get("retry-scan-period").(time.Duration),
		http: httpOptions{
			adminListen: strings.TrimSpace(fs.str("admin-listen")),
			idleTimeout: fs.get("http-idle-timeout").(time.Duration),
			readTimeout: fs.get("http-read-timeout").(time.Duration),
			maxConns:    fs.get("max-conns").(int),
			maxConnsIP:  fs.get("max-conns-per-ip").(int),
		},
		backupDir:          strings.TrimSpace(fs.str("backup-dir")),
		checkpointInterval: fs.get("checkpoint-interval").(time.Duration),
		maxWriteStall:      fs.get("max-write-stall").(time.Duration),
		uninvertedInterval: fs.get("uninverted-refetch-interval").(time.Duration),
	}
	bad := func(format string, args ...any) (serveOptions, error) {
		return serveOptions{}, fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
	}
	switch {
	case o.retryWorkers < 1 || o.retryHostWorkers < 1 || o.retryInterval <= 0 || o.retryMaxDelay < o.retryInterval:
		return bad("--retry-workers and --retry-host-workers must be ≥ 1, and 0 < --retry-interval ≤ --retry-max-delay")
	case o.retryScanPeriod <= 0:
		return bad("--retry-scan-period %q: must be positive", fs.str("retry-scan-period"))
	case o.captureWait <= 0:
		return bad("--capture-wait %q: must be positive", fs.str("capture-wait"))
	case o.uninvertedInterval <= 0:
		return bad("--uninverted-refetch-interval %q: must be positive", fs.str("uninverted-refetch-interval"))
	case fs.get("devnet-accounts").(int) < 1:
		return bad("--devnet-accounts %q: must be at least 1", fs.str("devnet-accounts"))
	case fs.get("devnet-rate").(float64) < 0:
		return bad("--devnet-rate %q: must not be negative (0 = no live traffic)", fs.str("devnet-rate"))
	case strings.TrimSpace(o.dataDir) == "":
		return bad("--data-dir %q: want a directory", o.dataDir)
	case strings.TrimSpace(o.listen) == "":
		return bad("--listen %q: want host:port or :port (an empty address would bind a random port on every interface)", o.listen)
	}
	if err := checkListen(o.listen); err != nil {
		return bad("--listen %q: want host:port or :port (%v)", o.listen, err)
	}
	if a := o.http.adminListen; a != "" {
		if err := checkListen(a); err != nil {
			return bad("--admin-listen %q: want host:port, :port, or empty to disable it (%v)", a, err)
		}
	}
	switch {
	case o.workers <= 0:
		return bad("--backfill-workers %d: must be at least 1", o.workers)
	case o.window <= 0:
		return bad("--enumeration-window %d: must be at least 1", o.window)
	case o.maxRepos < 0:
		return bad("--max-repos %d: must not be negative", o.maxRepos)
	case o.getRepoTimeout <= 0:
		return bad("--getrepo-timeout %s: must be positive", o.getRepoTimeout)
	case o.http.idleTimeout <= 0 || o.http.readTimeout <= 0:
		return bad("--http-idle-timeout and --http-read-timeout must be positive")
	case o.http.maxConns < 0 || o.http.maxConnsIP < 0:
		return bad("--max-conns and --max-conns-per-ip must not be negative")
	case o.checkpointInterval < 0:
		return bad("--checkpoint-interval %s: must not be negative", o.checkpointInterval)
	case o.hostRetries < 0:
		return bad("--backfill-host-retries %d: must not be negative", o.hostRetries)
	case o.hostWorkers <= 0:
		return bad("--backfill-host-workers %d: must be at least 1", o.hostWorkers)
	case o.enumerate != "" && o.enumerate != bootstrap.EnumerateHosts && o.enumerate != bootstrap.EnumerateRelay:
		return bad("--enumerate %q: want hosts or relay", o.enumerate)
	}
	for _, h := range strings.Split(fs.str("loopback-hosts"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			if _, err := upstream.ParseLoopbackHost(h); err != nil {
				return bad("--loopback-hosts %q: %v", fs.str("loopback-hosts"), err)
			}
			o.loopbackHosts = append(o.loopbackHosts, h)
		}
	}
	if s := strings.TrimSpace(fs.str("repos")); s != "" {
		seen := map[string]bool{}
		for _, d := range strings.Split(s, ",") {
			d = strings.TrimSpace(d)
			if d == "" || seen[d] {
				continue
			}
			if _, err := syntax.ParseDID(d); err != nil {
				return bad("--repos: %q is not a DID: %v", d, err)
			}
			seen[d] = true
			o.repos = append(o.repos, d)
		}
		if len(o.repos) == 0 {
			return bad("--repos names no DID")
		}
		if o.maxRepos > 0 {
			return bad("--repos and --max-repos are exclusive")
		}
	}
	u, err := url.Parse(strings.TrimSpace(o.relay))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("--relay %q: want an http(s) URL", o.relay)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		// The xrpc paths are appended to the relay's root: with a path,
		// listRepos and the firehose would answer 404.
		return bad("--relay %q: want an http(s) URL without a path", o.relay)
	}
	mem, err := parseBytes(fs.str("backfill-memory"))
	if err != nil {
		return bad("--backfill-memory: %v", err)
	}
	o.memory = mem
	if o.minFree, err = parseMinFree(fs.str("min-free")); err != nil {
		return bad("--min-free: %v", err)
	}
	if o.maxWriteStall <= 0 {
		return bad("--max-write-stall %s: must be positive", o.maxWriteStall)
	}
	if o.scratchBudget, err = parseBytes(fs.str("scratch-budget")); err != nil {
		return bad("--scratch-budget: %v", err)
	}
	if o.minBody, err = parseBytes(fs.str("getrepo-min-body")); err != nil {
		return bad("--getrepo-min-body: %v", err)
	}
	if o.subscribers, err = subscriberLimits(fs); err != nil {
		return bad("%v", err)
	}
	if o.compactionInterval, o.compactionTombstones, err = compactionSchedule(fs); err != nil {
		return bad("%v", err)
	}
	if o.compactionMaxBatch, err = parseBytes(fs.str("compaction-max-account-batch")); err != nil || o.compactionMaxBatch > archive.MaxCompactAccountBatch {
		return bad("--compaction-max-account-batch %q: want auto or a size of at most %dMiB", fs.str("compaction-max-account-batch"), archive.MaxCompactAccountBatch>>20)
	}
	if o.verify, err = identOptions(fs); err != nil {
		return bad("%v", err)
	}
	if o.heal, err = healOptionsFrom(fs); err != nil {
		return bad("%v", err)
	}
	if o.nats, err = natsOptions(fs); err != nil {
		return serveOptions{}, err
	}
	return o, nil
}

// checkListen checks a listen address's form before anything binds it:
// host:port or :port, the port a number up to 65535 or a service name.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	_, err = net.LookupPort("tcp", port)
	return err
}

// compactionSchedule reads --compaction-interval and
// --compaction-tombstones as node.Config takes them: 0 (off) becomes
// negative.
func compactionSchedule(fs *flagSet) (time.Duration, int64, error) {
	interval, tombs := fs.get("compaction-interval").(time.Duration), fs.get("compaction-tombstones").(int64)
	if interval < 0 || tombs < 0 {
		return 0, 0, fmt.Errorf("--compaction-interval and --compaction-tombstones must not be negative (0 turns each off)")
	}
	if interval == 0 {
		interval = -1
	}
	if tombs == 0 {
		tombs = -1
	}
	return interval, tombs, nil
}

// identOptions reads --verify, --plc and the --ident-* flags; nil for off.
func identOptions(fs *flagSet) (*ident.Config, error) {
	mode, err := ident.ParseMode(strings.TrimSpace(fs.str("verify")))
	if err != nil {
		return nil, fmt.Errorf("--verify: %v", err)
	}
	c := &ident.Config{Mode: mode, PLC: strings.TrimSpace(fs.str("plc")),
		Timeout: fs.get("ident-timeout").(time.Duration), Concurrency: fs.get("ident-concurrency").(int),
		Retries: fs.get("ident-retries").(int), CacheSize: fs.get("ident-cache-size").(int), TTL: fs.get("ident-ttl").(time.Duration),
		HandleTimeout: fs.get("handle-timeout").(time.Duration), HandleTTL: fs.get("handle-ttl").(time.Duration),
		Verifiers: fs.get("verify-workers").(int), Rate: -1}
	if r := strings.TrimSpace(fs.str("ident-rate")); r != "auto" {
		if c.Rate, err = strconv.ParseFloat(r, 64); err != nil || !(c.Rate >= 0) || math.IsInf(c.Rate, 0) {
			return nil, fmt.Errorf("--ident-rate %q: want auto or a rate ≥ 0", r)
		}
	}
	switch {
	case c.Timeout <= 0 || c.TTL <= 0 || c.HandleTimeout <= 0 || c.HandleTTL <= 0:
		return nil, errors.New("--ident-timeout, --ident-ttl, --handle-timeout and --handle-ttl must be positive")
	case c.Verifiers < 0:
		return nil, errors.New("--verify-workers must be ≥ 0")
	case c.Concurrency < 1 || c.CacheSize < 1 || c.Retries < 0:
		return nil, errors.New("--ident-concurrency and --ident-cache-size must be ≥ 1, --ident-retries ≥ 0")
	}
	if c.Retries == 0 {
		c.Retries = -1 // ident.Config: 0 is the default, negative none
	}
	if c.PLC != "auto" {
		if u, err := url.Parse(c.PLC); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			return nil, fmt.Errorf("--plc %q: want auto or an http(s) URL without a path", c.PLC)
		}
	}
	if mode == ident.ModeOff {
		return nil, nil
	}
	return c, nil
}

// plcFor resolves --plc auto for relay: the relay itself when it is on
// loopback (the simulated network serves DID documents), the public
// directory otherwise.
func plcFor(plc, relay string) string {
	if plc != "auto" {
		return plc
	}
	if u, err := url.Parse(relay); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); (err == nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return strings.TrimSuffix(relay, "/")
		}
	}
	return ident.DefaultPLC
}

// parseMinFree reads --min-free: auto (0), off or 0 (-1: no floor), or a
// size.
func parseMinFree(s string) (int64, error) {
	switch t := strings.TrimSpace(s); {
	case strings.EqualFold(t, "off") || t == "0":
		return -1, nil
	}
	n, err := parseBytes(s)
	if err != nil || strings.TrimSpace(s) == "" {
		return 0, fmt.Errorf("%q: want auto, off, or a size such as 2GiB", s)
	}
	return n, nil
}

// subscriberLimits reads the subscriber flags.
func subscriberLimits(fs *flagSet) (subscribe.Config, error) {
	c := subscribe.Config{
		StallTimeout:        fs.get("subscriber-stall-timeout").(time.Duration),
		HelloTimeout:        fs.get("subscriber-hello-timeout").(time.Duration),
		MaxSubscribers:      fs.get("max-subscribers").(int),
		MaxSubscribersPerIP: fs.get("max-subscribers-per-ip").(int),
		TrustForwardedFor:   fs.get("trust-x-forwarded-for").(bool),
		ReplayReaders:       fs.get("replay-readers").(int),
		ReplayDuty:          fs.get("replay-duty").(float64),
		ScanReplays:         fs.get("scan-replays").(bool),
		MessageRate:         fs.get("subscriber-message-rate").(float64),
		MessageBurst:        fs.get("subscriber-message-burst").(int),
	}
	in := fs.str("subscriber-buffer-budget")
	budget, err := parseBytes(in)
	if least := c.Reservation(); err != nil || budget < least {
		return c, fmt.Errorf("--subscriber-buffer-budget %q: want a size of at least one subscriber's reservation, %d KiB, such as 1GiB", in, least>>10)
	}
	c.BufferBudget = budget
	switch {
	case c.StallTimeout <= 0 || c.HelloTimeout <= 0:
		return c, fmt.Errorf("--subscriber-stall-timeout and --subscriber-hello-timeout must be positive")
	case c.MaxSubscribers < 1 || c.MaxSubscribersPerIP < 1:
		return c, fmt.Errorf("--max-subscribers and --max-subscribers-per-ip must be at least 1")
	case c.ReplayReaders < 0:
		return c, fmt.Errorf("--replay-readers %d: must not be negative", c.ReplayReaders)
	case c.ReplayDuty <= 0 || c.ReplayDuty > 1:
		return c, fmt.Errorf("--replay-duty %g: want 0 < d ≤ 1", c.ReplayDuty)
	case c.MessageRate <= 0 || c.MessageBurst < 1:
		return c, fmt.Errorf("--subscriber-message-rate must be positive and --subscriber-message-burst at least 1")
	}
	return c, nil
}

// parseBytes reads "auto" (0), a byte count, or a number with a unit
// (KiB, MiB, GiB, TiB, or KB, MB, GB, TB).
func parseBytes(in string) (int64, error) {
	s := strings.TrimSpace(in)
	if s == "" || strings.EqualFold(s, "auto") {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToLower(s), strings.ToLower(u.suffix)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || v*mult > 1<<50 {
		return 0, fmt.Errorf("%q: want auto, or a positive size such as 2GiB", in)
	}
	return int64(v * mult), nil
}

// server is the running process: the store, the metrics registry, the
// bootstrap in progress, and the HTTP endpoints.
type server struct {
	reg *prometheus.Registry
	log *logger
	ck  checkpointConfig // the admin checkpoint endpoint's limits

	mu     sync.Mutex
	node   *node.Node        // nil until built
	store  *archive.Store    // nil until open
	w      *archive.Writer   // nil until started
	state  string            // what the process is doing, for /status before the store is open
	sub    *subscribe.Server // clients: /subscribe and the status endpoints
	health lifecycle.Health  // the phase as the lifecycle last reported it, and any fatal error

	hist      *subscribe.StatusHistory // the rates /status charts; nil: none
	recent    *recentLog               // the last warnings and errors; nil: none
	enumerate string                   // --enumerate: how /status says discovery and repair list
	roster    *bootstrap.RosterView    // /status's view of store's roster (statusJSON makes it); nil before
	startup   *archive.Startup         // the one-time read a start waits for, as the store and bootstrap report it; nil: none shown
	ckh       *checkpointHandler       // the admin checkpoint endpoint, whose state /status shows; nil without one
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "backstream_build_info",
		Help:        "Always 1; labels describe the build.",
		ConstLabels: prometheus.Labels{"version": version()},
	}, func() float64 { return 1 }))
	return reg
}

// stateOpening is /status's phase while the process opens: before the
// store is open, and until the lifecycle has entered the phase the store
// holds.
const stateOpening = "opening"

// newServer is serve's server before anything listens or opens: "opening",
// its registry reg holding the startup report's gauge.
func newServer(o serveOptions, reg *prometheus.Registry, log *slog.Logger, recent *recentLog) *server {
	return &server{reg: reg, log: log, state: stateOpening, startup: startupReport(reg), recent: recent, enumerate: o.enumerate,
		hist: subscribe.NewStatusHistory(subscribe.DefaultHistoryInterval, subscribe.DefaultHistoryPoints)}
}

// startupReport is the report of the one-time reads a start waits for,
// shown on /status and as the gauge backstream_startup_step on reg.
func startupReport(reg prometheus.Registerer) *archive.Startup {
	st := &archive.Startup{}
	reg.MustRegister(st.Collector())
	return st
}

func (s *server) set(f func(s *server)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

// statusJSON is the status report served on /status (always with 200, by
// the subscribe server): the keys of `backstream status --json`, plus the
// live bootstrap progress, with the lifecycle's phase (lifecyclePhase).
// Before the store is open, or if reading it fails, the report says so in
// "phase" / "error" rather than failing the request.
func (s *server) statusJSON() any {
	s.mu.Lock()
	store, w, n, state, ckh := s.store, s.w, s.node, s.state, s.ckh
	if store != nil && s.roster == nil {
		s.roster = bootstrap.NewRosterView(store)
	}
	roster := s.roster
	s.mu.Unlock()
	rep := emptyStatus(state)
	if store != nil {
		if got, err := buildStatus(store, roster, s.enumerate); err != nil {
			rep.Error = err.Error()
		} else {
			rep = got
		}
	}
	if store != nil {
		rep.Phase = s.lifecyclePhase()
	}
	if step, ok := s.startup.Current(); ok {
		rep.Startup = &step
	}
	var counts *archive.Counts
	if w != nil && rep.Error == "" {
		// Progress as of the last synced batch (R8): a read of the store
		// can show a batch whose sync has not completed.
		c := w.DurableCounts()
		rep.setCounts(c)
		rep.Archive.TipSeq = w.Live().Tip()
		counts = &c
	}
	if err := s.health.Err(); err != nil {
		rep.Error = "stopping on a fatal error: " + err.Error()
	}
	if n != nil && rep.Gaps != nil {
		rep.Gaps.fromNode(n)
	}
	if n != nil {
		if boot := n.Bootstrap(); boot != nil {
			p := boot.Progress()
			if counts != nil { // the bar agrees with the repos by status
				p.SetCounts(*counts)
			}
			rep.Bootstrap = &p
		}
		c := n.Compaction()
		rep.Compaction = &c
		l := n.RelayLink()
		rep.Firehose = &l
		if r := n.Retrier(); r != nil {
			rep.Retry = newStatusRetry(r.Status())
		}
	}
	if s.hist != nil {
		h := s.hist.Report()
		rep.History = &h
	}
	rep.LastErrors = s.recent.last()
	if n != nil {
		rep.NATS = n.NATSStatus()
	}
	if ckh != nil {
		rep.Checkpoint = ckh.status(store)
	}
	return rep
}

// lifecyclePhase is the phase /status reports once the store is open: the
// one the lifecycle has entered, which /readyz and /subscribe follow, not
// the store's. The store's phase row is committed before the lifecycle
// enters it (and is there from the start on a restart), so a report read
// from it alone says steady_state to a client /subscribe then refuses.
// Until the lifecycle has entered a phase the process is opening.
func (s *server) lifecyclePhase() string {
	if p := s.health.Phase(); p != "" {
		return string(p)
	}
	return stateOpening
}

// ready: clients are served only in steady state.
func (s *server) ready() bool { return s.health.Ready() }

func runServe(ctx context.Context, env *cmdEnv) error {
	o, err := serveOptionsFrom(env.fs)
	if err != nil {
		return err
	}
	recent := &recentLog{}
	log := slog.New(recent.handler(env.log.Handler()))
	crash, err := crashpoint.FromEnv()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	s := newServer(o, newRegistry(), log, recent)
	sc := o.subscribers
	sc.Ready, sc.Healthy, sc.StatusJSON = s.ready, s.health.Err, subscribe.CacheStatus(s.statusJSON, s.health.Err, s.health.Phase)
	sc.PublicStatus = publicStatus
	sc.Lagging = s.lagging
	sc.Metrics, sc.Logger = subscribe.NewMetrics(s.reg), log.With("component", "subscribe")
	s.sub, err = subscribe.New(sc)
	if err != nil {
		return err
	}
	defer s.sub.Close() // hijacked websockets are not tracked by http.Server.Shutdown

	lim := connCaps(o, log)
	if s.ck, err = newCheckpointConfig(o.backupDir, o.checkpointInterval); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	// Answer /status (and /metrics on the admin listener) before anything
	// slow happens.
	hs, err := s.listenHTTP(o.listen, o.http, lim)
	if err != nil {
		return err
	}
	// The sampler gathers the registry, the store's collector included:
	// it stops before the store closes.
	stopSampling := startHistory(ctx, s.hist, s.reg, subscribe.DefaultHistoryInterval)
	defer stopSampling()
	var httpDown sync.Once
	stopHTTP := func() {
		httpDown.Do(func() {
			hs.shutdown(5 * time.Second)
			_ = s.sub.Close()
		})
	}
	defer stopHTTP()
	log.Info("serving", "listen", hs.publicAddr.String(), "admin_listen", addrString(hs.adminAddr), "data_dir", o.dataDir,
		"backup_dir", s.ck.backupDir)

	if env.fs.get("devnet").(bool) {
		net, err := startDevnet(ctx, env.fs, &o, log)
		if err != nil {
			return err
		}
		defer net.Close()
	}

	if o.memory == 0 { // auto, sized once here so that the starting line shows it
		o.memory = backfill.DefaultMemoryBudget()
	}
	n, err := node.New(o.nodeConfig(s, crash))
	if err != nil {
		return err
	}
	defer func() {
		// Requests (a checkpoint, /status) and subscribers read the store:
		// they end before it closes.
		stopHTTP()
		stopSampling()
		n.Close()
	}()
	s.set(func(s *server) { s.node, s.store, s.w, s.state = n, n.Store(), n.Writer(), "" })
	log.Info("starting", "relay", o.relay, "workers", o.workers, "window", o.window,
		"memory_budget", o.memory, "getrepo_timeout", o.getRepoTimeout, "repos", len(o.repos), "max_repos", o.maxRepos)
	if err := s.runNode(ctx, n, hs.errc); err != nil {
		return err
	}
	log.Info("stopped; a restart resumes from the durable state")
	stopHTTP() // requests and subscribers read the store: they end before it closes
	stopSampling()
	return n.Close()
}

// startDevnet starts the simulated network of package oracle in-process
// (demo mode, --devnet) and points o at its relay and hosts.
func startDevnet(ctx context.Context, fs *flagSet, o *serveOptions, log *slog.Logger) (*oracle.Network, error) {
	accounts := fs.get("devnet-accounts").(int)
	log.Info("building the simulated network (--devnet)", "accounts", accounts)
	net, err := oracle.Start(ctx, serveDevnetConfig(fs, log))
	switch {
	case errors.Is(err, oracle.ErrInvalidConfig):
		return nil, fmt.Errorf("%w: --devnet: %v", errUsage, err)
	case err != nil: // a valid address that cannot be bound: a failure to start, as a taken --listen is
		return nil, fmt.Errorf("--devnet-listen %s: %w", fs.str("devnet-listen"), err)
	}
	o.relay = net.RelayURL()
	o.loopbackHosts = append(o.loopbackHosts, net.LoopbackHosts()...)
	log.Info("simulated network up", "relay", o.relay)
	return net, nil
}

// serveDevnetConfig is the network of --devnet: --devnet-rate 0 is no
// live traffic (the oracle would take a zero rate as its default); the
// oracle's default hosts, or one per account when there are fewer
// accounts (the oracle refuses a host without one, and serve has no flag
// for them).
func serveDevnetConfig(fs *flagSet, log *slog.Logger) oracle.Config {
	accounts := fs.get("devnet-accounts").(int)
	c := oracle.Config{
		Listen: fs.str("devnet-listen"), Accounts: accounts, Hosts: min(oracle.DefaultHosts, accounts), WebDIDs: oracle.DevnetWebDIDs(accounts),
		Rate: fs.get("devnet-rate").(float64), Logger: log.With("component", "devnet"),
	}
	if c.Rate == 0 {
		c.Traffic = oracle.TrafficNone
	}
	return c
}

// runNode runs n until it returns or ctx ends; an HTTP server's failure
// (errc) marks the process unhealthy and stops n first.
func (s *server) runNode(ctx context.Context, n *node.Node, errc <-chan error) error {
	runErr := make(chan error, 1)
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { runErr <- n.Run(nctx) }()
	select {
	case err := <-runErr:
		return err
	case herr := <-errc:
		err := fmt.Errorf("http server: %w", herr)
		s.health.Fail(err)
		cancel()
		<-runErr
		return err
	}
}

// connCaps raises the descriptor limit and derives the public listener's
// caps from it (an explicit --max-conns wins), logging both.
func connCaps(o serveOptions, log *slog.Logger) connLimits {
	lim := connLimits{Global: o.http.maxConns, PerIP: o.http.maxConnsIP}
	fd, err := raiseFDLimit()
	if err != nil {
		if lim.Global == 0 {
			lim.Global = fallbackMaxConns
		}
		log.Warn("reading or raising RLIMIT_NOFILE failed; the connection cap is not derived from it", "err", err, "max_conns", lim.Global)
		return lim
	}
	reserve := fdReserve(o.workers, o.retryWorkers)
	auto, fits := autoMaxConns(fd.Soft, reserve)
	if lim.Global == 0 {
		lim.Global = auto
	}
	log.Info("file descriptors", "soft_limit_found", fd.Was, "soft_limit", fd.Soft, "hard_limit", fd.Hard,
		"reserve", reserve, "max_conns", lim.Global, "max_conns_per_ip", lim.PerIP)
	if !fits && o.http.maxConns == 0 {
		log.Warn("the file descriptor limit leaves little room for connections after the reserve for the store and downloads; raise it (ulimit -n, LimitNOFILE=)",
			"limit", fd.Soft, "reserve", reserve, "max_conns", lim.Global)
	}
	return lim
}

// addrString is a's address, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// nodeConfig is the node serve runs: its flags, its registry, its
// subscribe server and probe state (answering since before the store was
// open), and the crash points of the environment.
func (o serveOptions) nodeConfig(s *server, crash *crashpoint.Set) node.Config {
	c := node.Config{
		DataDir: o.dataDir, Store: archive.Options{Logger: s.log, Startup: s.startup},
		Relay: o.relay, ResetRelay: o.resetRelay, LoopbackHosts: o.loopbackHosts,
		Bootstrap:     bootstrap.Config{Workers: o.workers, Window: o.window, Repos: o.repos, MaxRepos: o.maxRepos, Enumerate: o.enumerate, HostWorkers: o.hostWorkers, HostRetries: hostRetries(o.hostRetries)},
		Memory:        o.memory,
		ScratchBudget: o.scratchBudget, HostWorkers: o.hostWorkers, MinBodyBytes: o.minBody,
		AttemptTimeout: o.getRepoTimeout,
		CaptureWait:    o.captureWait,
		RetryWorkers:   o.retryWorkers, RetryHostWorkers: o.retryHostWorkers,
		RetryInterval: o.retryInterval, RetryMaxDelay: o.retryMaxDelay, RetryScanPeriod: o.retryScanPeriod,
		MinFree: o.minFree, MaxWriteStall: o.maxWriteStall,
		CompactionInterval: o.compactionInterval, CompactionTombstones: o.compactionTombstones, CompactionMaxAccountBatch: int(o.compactionMaxBatch),
		Registry: s.reg, Logger: s.log, Crash: crash,
		Server: s.sub, Health: &s.health,
		Verify: o.identConfig(), PLCExport: o.plcExport, UninvertedInterval: o.uninvertedInterval,
		NATS: o.nats,
	}
	o.heal.apply(&c)
	return c
}

// identConfig is --verify's configuration with --plc resolved for the
// relay; a relay on loopback under --plc auto (the simulated network) also
// answers did:web documents and handles (ident.Config.Web).
func (o serveOptions) identConfig() *ident.Config {
	if o.verify == nil {
		return nil
	}
	c := *o.verify
	auto := c.PLC == "auto"
	c.PLC = plcFor(c.PLC, o.relay)
	if auto && c.PLC != ident.DefaultPLC {
		c.Web = c.PLC // the simulated network: did:web and handles by Host
	}
	if c.Rate < 0 { // --ident-rate auto
		c.Rate = 0
		if c.PLC == ident.DefaultPLC {
			c.Rate = ident.DefaultRate
		}
	}
	return &c
}

// natsOptions are the --nats-* flags (nil without --nats-url).
func natsOptions(fs *flagSet) (*natssink.Config, error) {
	u := strings.TrimSpace(fs.str("nats-url"))
	if u == "" {
		return nil, nil
	}
	if err := natssink.CheckURLs(u); err != nil {
		return nil, fmt.Errorf("%w: --nats-url %q: %v", errUsage, u, err)
	}
	c := &natssink.Config{URLs: u, Stream: strings.TrimSpace(fs.str("nats-stream")), Replicas: fs.get("nats-replicas").(int),
		Creds: strings.TrimSpace(fs.str("nats-creds")), Window: fs.get("nats-window").(int)}
	from := fs.get("nats-from").(int)
	switch {
	case from < 0:
		return nil, fmt.Errorf("%w: --nats-from %d: must not be negative", errUsage, from)
	case c.Window < 1:
		return nil, fmt.Errorf("%w: --nats-window %d: must be at least 1", errUsage, c.Window)
	case c.Replicas < 0 || c.Replicas > natssink.MaxReplicas:
		return nil, fmt.Errorf("%w: --nats-replicas %d: want 0 (auto) to %d", errUsage, c.Replicas, natssink.MaxReplicas)
	}
	c.From = uint64(from)
	return c, nil
}

// hostRetries is --backfill-host-retries as bootstrap.Config.HostRetries
// takes it (negative: none; 0 would be the default).
func hostRetries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
