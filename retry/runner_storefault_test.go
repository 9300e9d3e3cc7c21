package retry_test

// Storage faults under the retry runner (S6): read faults swept over a
// pass. The write-path sweep needs the CommitHook seam and lives in
// runner_write_storefault_test.go.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

// sfEnv is a retry runner over a store on a given vfs: each round opens the
// store, runs one pass and closes everything, so a round can run under a
// fault and the next one without it, like a process restart.
type sfEnv struct {
	t     *testing.T
	net   *oracle.Network
	accts []world.Account
	hosts []string
}

func newSFEnv(t *testing.T) *sfEnv {
	t.Helper()
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 61, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	e := &sfEnv{t: t, net: n}
	for _, u := range n.HostURLs() {
		e.hosts = append(e.hosts, u[len("http://"):])
	}
	for _, a := range n.World().Accounts() {
		if a.Active && a.Records > 0 && len(e.accts) < 6 {
			e.accts = append(e.accts, a)
		}
	}
	return e
}

func sfStoreOpts(fs vfs.FS, hook func(string, [][]byte) error) archive.Options {
	o := archive.Options{FS: fs, Logger: quiet, CacheSize: 1, OnFatal: func(fe *archive.FatalError) { panic(fe) }}
	setCommitHook(&o, hook)
	return o
}

// seed writes the accounts as failed and due, and a parked third host,
// then flushes so that the pass reads sstables.
func (e *sfEnv) seed(mem vfs.FS) {
	e.t.Helper()
	s, err := archive.Open("/data", sfStoreOpts(mem, nil))
	if err != nil {
		e.t.Fatal(err)
	}
	w, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	var ups []archive.RepoUpdate
	for _, a := range e.accts {
		ups = append(ups, archive.RepoUpdate{DID: a.DID,
			Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldError | archive.FieldNextAttempt,
			State: archive.RepoState{Status: archive.StatusFailed, Active: true, Host: e.hosts[a.Host], Attempts: 1,
				ErrClass: "seeded", LastError: "seeded", NextAttemptUS: 1}})
	}
	park := archive.HostUpdate{Host: "parked.test", Func: func(h archive.HostState) archive.HostState {
		h.ParkedUntilUS = time.Now().Add(time.Hour).UnixMicro()
		return h
	}}
	if r, err := w.Apply(context.Background(), &archive.Unit{Repos: ups, Hosts: []archive.HostUpdate{park}}); err != nil || r.Refused != nil {
		e.t.Fatal(err, r.Refused)
	}
	w.Close()
	if err := s.DB().Flush(); err != nil {
		e.t.Fatal(err)
	}
	s.Close()
}

// pass opens the store on fs, runs one retry pass (arm runs once the
// runner is built) and closes everything.
func (e *sfEnv) pass(fs vfs.FS, hook func(string, [][]byte) error, arm func()) (retry.PassStats, error) {
	s, err := archive.Open("/data", sfStoreOpts(fs, hook))
	if err != nil {
		return retry.PassStats{}, err
	}
	defer func() {
		defer func() { recover() }() // Pebble may panic closing after a fatal write
		s.Close()
	}()
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		return retry.PassStats{}, err
	}
	defer w.Close()
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: e.t.TempDir(), LoopbackHosts: e.net.LoopbackHosts()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	jobs, err := backfill.NewRunner(retry.Backoff{Interval: time.Minute, MaxDelay: time.Hour}.JobOptions(backfill.Options{
		Source: c, Writer: w, Current: s, Logger: quiet, Retries: -1, AttemptTimeout: time.Minute,
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }}))
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := retry.New(retry.Config{Store: s, Writer: w, Jobs: jobs, Logger: quiet, Interval: time.Minute, MaxDelay: time.Hour, PageKeys: 2})
	if err != nil {
		e.t.Fatal(err)
	}
	arm()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.RunOnce(ctx)
}

// converged runs fault-free passes until every seeded repo is complete and
// checks that each folds to the world's records.
func (e *sfEnv) converged(mem vfs.FS) {
	e.t.Helper()
	for round := 0; ; round++ {
		if _, err := e.pass(mem, nil, func() {}); err != nil {
			e.t.Fatalf("fault-free pass: %v", err)
		}
		s, err := archive.Open("/data", sfStoreOpts(mem, nil))
		if err != nil {
			e.t.Fatal(err)
		}
		done := true
		for _, a := range e.accts {
			st, err := s.RepoState(a.DID)
			if err != nil {
				e.t.Fatal(err)
			}
			if st.Status != archive.StatusComplete {
				done = false
			}
		}
		if done {
			f := fold(e.t, s)
			for _, a := range e.accts {
				if !sameRecordsOf(e.net.World(), a.DID, f[a.DID]) {
					e.t.Fatalf("%s folds to %d records, the world has %d", a.DID, len(f[a.DID]), len(e.net.World().Records(a.DID)))
				}
			}
			s.Close()
			return
		}
		s.Close()
		if round == 3 {
			e.t.Fatal("seeded repos not complete after 4 fault-free passes (a failure written with a backoff?)")
		}
	}
}

func sameRecordsOf(w *world.World, did string, got map[string]string) bool {
	want := w.Records(did)
	if len(want) != len(got) {
		return false
	}
	for p, c := range want {
		if got[p] != c.String() {
			return false
		}
	}
	return true
}

// TestRetryReadFaultSweep (S6, S3, C2): every sstable read of a retry pass —
// the paged repo/ scan, the parked hosts, the writer's ratchet and repo
// state reads under each replacement — is made the first failing one in
// turn: alone (transient) or with every later read failing too (sticky).
// Each pass either stops with ErrFatal carrying the read failure or, once
// the fault no longer fires, finishes; a pass never ends "nothing due" over
// an unreadable scan. After
// each faulty pass, fault-free passes (a restart) converge: every seeded
// repo complete and folding to the world's records.
func TestRetryReadFaultSweep(t *testing.T) {
	e := newSFEnv(t)
	base := vfs.NewMem()
	e.seed(base)
	for _, mode := range []string{"transient", "sticky"} {
		t.Run(mode, func(t *testing.T) {
			n := 1
			for ; n < 5000; n++ {
				mem := vfs.NewMem()
				copyMemFS(t, base, mem)
				inj := storefault.NewReadFault()
				ps, err := e.pass(errorfs.Wrap(mem, inj), nil, func() {
					if mode == "sticky" {
						inj.FailFromNth(n)
					} else {
						inj.FailNth(n)
					}
				})
				inj.Disarm()
				if inj.Fired() == 0 {
					if err != nil {
						t.Fatalf("n=%d: no fault fired, yet: %v", n, err)
					}
					if ps.Results[retry.ResultComplete] != len(e.accts) {
						t.Fatalf("n=%d: fault-free pass %+v", n, ps)
					}
					break
				}
				if err == nil {
					t.Fatalf("n=%d: read %d failed and the pass succeeded: %+v", n, n, ps)
				}
				if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("n=%d: %v; want ErrFatal carrying the read failure", n, err)
				}
				e.converged(mem)
			}
			if n < 10 {
				t.Fatalf("sweep ended after %d reads: the pass barely read the store", n)
			}
			t.Logf("swept %d sstable reads of a retry pass", n-1)
		})
	}
}

// copyMemFS copies the data dir of src to dst (Pebble's vfs.Clone).
func copyMemFS(t *testing.T, src, dst vfs.FS) {
	t.Helper()
	if _, err := vfs.Clone(src, dst, "/data", "/data"); err != nil {
		t.Fatal(err)
	}
}
