package archive

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/backstream/backstream/internal/storefault"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// TestTopFailingHostsReadsOnceUntilAChange: after an outage of 20,000 hosts
// that all recovered (their hostrank/ rows deleted, the deletions not yet
// compacted away) the ranking's read steps over every deleted row ahead of
// the few hosts still failing. /status (polled every 5 s by each open
// status page) reads the ranking again only after a batch changed it: with
// no failure counted or cleared since, the read costs no sstable block.
// A change is read.
func TestTopFailingHostsReadsOnceUntilAChange(t *testing.T) {
	const recovered = 20_000
	ctx := context.Background()
	rf := storefault.NewReadFault()
	s, err := Open("/data", Options{FS: errorfs.Wrap(vfs.NewMem(), rf), Logger: quietLogger, CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	state := func(did, host string, st RepoStatus) RepoUpdate {
		return RepoUpdate{DID: did, Fields: FieldStatus | FieldActive | FieldHost | FieldError,
			State: RepoState{Status: st, Active: true, Host: host, ErrClass: "transient", LastError: "down"}}
	}
	apply := func(ups []RepoUpdate) {
		t.Helper()
		if rc, err := w.Apply(ctx, &Unit{Repos: ups}); err != nil || rc.Refused != nil {
			t.Fatalf("apply: %v %v", err, rc.Refused)
		}
	}
	for _, st := range []RepoStatus{StatusFailed, StatusComplete} {
		for i := 0; i < recovered; i += 1000 {
			var ups []RepoUpdate
			for j := i; j < i+1000; j++ {
				ups = append(ups, state(fmt.Sprintf("did:plc:out%06daaaaaaaaaaaaaa", j), fmt.Sprintf("pds%06d.example", j), st))
			}
			apply(ups)
		}
	}
	apply([]RepoUpdate{state("did:plc:still1aaaaaaaaaaaaaaaaaaa", "still1.example", StatusFailed),
		state("did:plc:still2aaaaaaaaaaaaaaaaaaa", "still2.example", StatusFailed)})
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	rf.FailFromNth(math.MaxInt) // counts, never fails
	top := func(want ...string) int64 {
		t.Helper()
		before := rf.Reads()
		got, err := s.TopFailingHosts(10)
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, h := range got {
			hosts = append(hosts, h.Host)
		}
		if !reflect.DeepEqual(hosts, want) {
			t.Fatalf("top failing hosts %v, want %v", hosts, want)
		}
		return rf.Reads() - before
	}
	first := top("still1.example", "still2.example")
	again := top("still1.example", "still2.example")
	t.Logf("%d recovered hosts' deleted rank rows: the first read %d sstable reads, the next %d", recovered, first, again)
	if again != 0 {
		t.Fatalf("the ranking read again with nothing changed: %d sstable reads (the first: %d), want 0", again, first)
	}
	apply([]RepoUpdate{state("did:plc:still3aaaaaaaaaaaaaaaaaaa", "still0.example", StatusFailed)})
	top("still0.example", "still1.example", "still2.example")
}
