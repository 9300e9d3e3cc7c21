package ident_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestReadExportNeverBringsBackAnOlderIdentity: three accounts change
// after the directory logged their genesis. X rotates its key and moves
// PDS, and the resolver resolves it directly (its #identity, then a
// lookup); Z rotates, and its #identity's refresh fails (the directory
// answering 500), so only the invalidation is held; Y rotates unseen. The
// export then goes by each genesis with more than the cache holds of other
// DIDs' ops before it, so memory no longer holds what the resolver knew.
// After every page, neither a lookup, nor a restarted resolver reading
// ident/, nor the row itself gives X's or Z's genesis key, nor X's old PDS
// (the authority check refuses it); Y's own later op (its rotation)
// replaces its genesis loaded by the same read, and its row read back does
// not count as resolved; a tombstone unloads its DID's genesis, loaded by
// the same read and evicted since.
func TestReadExportNeverBringsBackAnOlderIdentity(t *testing.T) {
	ctx := context.Background()
	n, err := oracle.Start(ctx, oracle.Config{Accounts: 1100, RecordsMean: 1, Hosts: 2, Seed: 5, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	// The directory's log as it stands: a genesis for every account.
	resp, err := http.Get(n.RelayURL() + "/export?count=1")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	x, y, z := exportAccount(t, n, 100), exportAccount(t, n, 200), exportAccount(t, n, 300)
	for _, a := range []world.Account{x, y, z} {
		if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(a.DID) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.MoveHost(x.DID, 1-x.Host) }); err != nil {
		t.Fatal(err)
	}
	oldPDS := hostOf(n.HostURLs()[x.Host])

	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: n.RelayURL(), Store: st, Persist: st.persist, CacheSize: 4, Retries: -1,
		Sleep: noSleep, Metrics: ident.NewMetrics(reg)})
	defer r.Close()
	r.Invalidate(x.DID) // X's #identity, answered
	if info, _, err := r.Lookup(ctx, x.DID); err != nil || info.KeyMultibase == x.PublicKeyMultibase || info.PDSHost() == oldPDS {
		t.Fatalf("X resolved after its #identity: %+v %v", info, err)
	}
	n.Faults().FailPLC(1)
	r.Invalidate(z.DID) // Z's #identity, whose refresh fails
	promtest.Eventually(t, 5*time.Second, "Z's refresh fails", func() bool {
		return promtest.Value(t, reg, "backstream_ident_refresh_errors_total", nil) == 1
	})

	check := func(when string) {
		t.Helper()
		restarted := ident.New(ident.Config{PLC: n.RelayURL(), Store: st, Sleep: noSleep})
		defer restarted.Close()
		for name, a := range map[string]world.Account{"X": x, "Z": z} {
			row, _ := st.Ident(a.DID)
			if strings.Contains(row.Key, a.PublicKeyMultibase) {
				t.Fatalf("%s: %s's ident/ row holds its genesis key: %+v", when, name, row)
			}
			for rname, res := range map[string]*ident.Resolver{"lookup": r, "restarted resolver's lookup": restarted} {
				info, _, err := res.Lookup(ctx, a.DID)
				if err != nil || info.KeyMultibase == a.PublicKeyMultibase {
					t.Fatalf("%s: %s: %s gives its genesis key (%v)", when, name, rname, err)
				}
				if name == "X" && ident.CheckAuthority(info, oldPDS) == nil {
					t.Fatalf("%s: %s: the PDS X left, %s, is its authority: %+v", when, rname, oldPDS, info)
				}
			}
		}
	}
	stats, err := r.ReadExport(ctx, "", func(_ context.Context, cursor string) error {
		check("after the page up to " + cursor)
		return nil
	})
	if err != nil || stats.Pages != 2 {
		t.Fatalf("export: %+v %v, want two pages", stats, err)
	}
	check("after the read")
	rotated, _ := n.World().Account(y.DID)
	restarted := ident.New(ident.Config{PLC: n.RelayURL(), Store: st, Sleep: noSleep})
	defer restarted.Close()
	before := n.DIDDocRequests()
	for _, res := range []*ident.Resolver{r, restarted} {
		info, _, err := res.Lookup(ctx, y.DID)
		if err != nil || info.KeyMultibase != rotated.PublicKeyMultibase {
			t.Fatalf("Y after the read: %+v %v, want its rotated key from its later op", info, err)
		}
		if info.ResolvedSince(time.Time{}) {
			t.Fatalf("Y: a document from the export counts as resolved: %+v", info)
		}
	}
	if got := n.DIDDocRequests() - before; got != 0 {
		t.Fatalf("Y: %d directory requests, want its identity from the export", got)
	}
	// A tombstone unloads its DID's genesis, loaded by the same read and
	// evicted since.
	for _, did := range n.RetiredDIDs() {
		for _, res := range []*ident.Resolver{r, restarted} {
			if info, _, err := res.Lookup(ctx, did); !errors.Is(err, ident.ErrUnresolvable) {
				t.Fatalf("tombstoned %s: %+v %v, want ErrUnresolvable", did, info, err)
			}
		}
	}
}

// exportAccount is the first active did:plc account from the i-th of the
// world's accounts on: its genesis comes about i ops into the export.
func exportAccount(t *testing.T, n *oracle.Network, i int) world.Account {
	t.Helper()
	for _, a := range n.World().Accounts()[i:] {
		if a.Active && strings.HasPrefix(a.DID, "did:plc:") {
			return a
		}
	}
	t.Fatal("no active did:plc account")
	return world.Account{}
}

// brokenStore is an ident/ store whose every read fails with err.
type brokenStore struct{ err error }

func (s brokenStore) Ident(string) (archive.Ident, error) { return archive.Ident{}, s.err }

// An export op of a DID whose ident/ row cannot be read, or does not
// decode, stops the read with that error (fail closed: what the row says
// is unknown, so the op may be older), not ErrExportUnavailable, and loads
// nothing. A DID without a row is loaded, and so is one whose row decodes
// but holds a key that does not parse (the rule reads only the row's time
// and source: the op is newer than the row).
func TestReadExportStopsOnAnUnreadableRow(t *testing.T) {
	read := func(st ident.Store, did string) (ident.ExportStats, bool, error) {
		x := &exportTransport{lines: []string{exportOp(did, newPublicKey(t).DIDKey(), "2024-01-01T00:00:00.001Z")}}
		r := ident.New(ident.Config{PLC: "http://plc.test", Store: st, Sleep: noSleep, HTTPClient: &http.Client{Transport: x}})
		defer r.Close()
		stats, err := r.ReadExport(context.Background(), "", nil)
		return stats, r.Known(did), err
	}
	injected := errors.New("injected read error")
	st, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	badKey, err := archive.EncodeIdent(archive.Ident{Key: "zNotAKey", FetchedUS: 1})
	if err != nil {
		t.Fatal(err)
	}
	for did, v := range map[string][]byte{stubDIDA: []byte("not an ident/ value"), stubDIDB: badKey} {
		if err := st.DB().Set(archive.IdentKey(did), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		store ident.Store
		want  error
	}{"unreadable": {brokenStore{injected}, injected}, "malformed": {st, archive.ErrMalformed}} {
		stats, known, err := read(c.store, stubDIDA)
		if !errors.Is(err, c.want) || errors.Is(err, ident.ErrExportUnavailable) || stats.Loaded != 0 || known {
			t.Fatalf("%s row: %+v %v, want the read stopped by %v", name, stats, err, c.want)
		}
	}
	for _, did := range []string{stubDIDB, "did:plc:cccccccccccccccccccccccc"} {
		if stats, known, err := read(st, did); err != nil || stats.Loaded != 1 || !known {
			t.Fatalf("%s: %+v %v, want it loaded", did, stats, err)
		}
	}
}
