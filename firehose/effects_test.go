package firehose

import (
	"fmt"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestEffectsMatrix: every repo status × stored activity × event kind (M8,
// S7, S8). The expectations are written out, not derived.
func TestEffectsMatrix(t *testing.T) {
	const now = int64(1_700_000_000_000_000)
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	const (
		on   = "account active"
		off  = "account deactivated"
		gone = "account deleted"
		sync = "sync"
	)
	events := map[string]archive.Event{
		on:   {Kind: archive.KindAccount, DID: did, Active: true},
		off:  {Kind: archive.KindAccount, DID: did, Active: false, Status: "deactivated"},
		gone: {Kind: archive.KindAccount, DID: did, Active: false, Status: "deleted"},
		sync: {Kind: archive.KindSync, DID: did, Rev: "3lbbbbbbbbbbb"},
	}
	// none: no write. due: Refetch and NextAttemptUS set. set: only the
	// account fields change.
	type want struct {
		write   bool
		refetch archive.Refetch
	}
	none := want{}
	set := want{write: true}
	react := want{write: true, refetch: archive.RefetchReactivated}
	resync := want{write: true, refetch: archive.RefetchSync}
	S := archive.StatusNotStarted
	P := archive.StatusPending
	C := archive.StatusComplete
	F := archive.StatusFailed
	U := archive.StatusUnavailable
	cases := []struct {
		status archive.RepoStatus
		active bool
		kind   string
		want   want
	}{
		// not_started: listed active and not yet fetched, or listed inactive.
		{S, true, on, none}, {S, true, off, set}, {S, true, gone, set}, {S, true, sync, resync},
		{S, false, on, react}, {S, false, off, set}, {S, false, gone, set}, {S, false, sync, none},
		// pending: may hold partial rows; coming back active means fetch it.
		{P, true, on, react}, {P, true, off, set}, {P, true, gone, set}, {P, true, sync, resync},
		{P, false, on, react}, {P, false, off, set}, {P, false, gone, set}, {P, false, sync, none},
		// complete.
		{C, true, on, none}, {C, true, off, set}, {C, true, gone, set}, {C, true, sync, resync},
		{C, false, on, react}, {C, false, off, set}, {C, false, gone, set}, {C, false, sync, none},
		// failed: retried anyway; only a comeback from inactive marks it.
		{F, true, on, none}, {F, true, off, set}, {F, true, gone, set}, {F, true, sync, resync},
		{F, false, on, react}, {F, false, off, set}, {F, false, gone, set}, {F, false, sync, none},
		// unavailable: deactivated/suspended/takendown when fetched.
		{U, true, on, react}, {U, true, off, set}, {U, true, gone, set}, {U, true, sync, resync},
		{U, false, on, react}, {U, false, off, set}, {U, false, gone, set}, {U, false, sync, none},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/active=%v/%s", tc.status, tc.active, tc.kind), func(t *testing.T) {
			cur := archive.RepoState{
				Status: tc.status, Active: tc.active, BackfillRev: "3laaaaaaaaaaa", Host: "pds.example",
				Attempts: 2, NextAttemptUS: 42, Records: 7,
			}
			if !tc.active {
				cur.AccountStatus = "takendown"
			}
			ev := events[tc.kind]
			up := Effects(&ev, now)
			if up == nil || up.Func == nil || up.DID != did {
				t.Fatalf("Effects = %+v, want a conditional update of %s", up, did)
			}
			next, write := up.Func(cur, true)
			if write != tc.want.write {
				t.Fatalf("write = %v, want %v (next %+v)", write, tc.want.write, next)
			}
			if !write {
				return
			}
			exp := cur
			if ev.Kind == archive.KindAccount {
				exp.Active, exp.AccountStatus = ev.Active, ev.Status
			}
			if tc.want.refetch != archive.RefetchNone {
				exp.Refetch, exp.NextAttemptUS = tc.want.refetch, now
			}
			if next != exp {
				t.Fatalf("next state\n got  %+v\n want %+v", next, exp)
			}
		})
	}
	// An unknown repo is never created, whatever the event.
	for kind, ev := range events {
		ev := ev
		if _, write := Effects(&ev, now).Func(archive.RepoState{}, false); write {
			t.Errorf("%s on an unknown repo writes a state", kind)
		}
	}
	// Record operations and identity rows have no effect.
	for _, k := range []archive.Kind{archive.KindCreate, archive.KindUpdate, archive.KindDelete, archive.KindIdentity} {
		if up := Effects(&archive.Event{Kind: k, DID: did}, now); up != nil {
			t.Errorf("%s has effects %+v", k, up)
		}
	}
}

// TestEffectsCaptureValues: the update does not alias the event it came
// from (merge reuses its event buffer while the writer runs Func later).
func TestEffectsCaptureValues(t *testing.T) {
	ev := archive.Event{Kind: archive.KindAccount, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Active: true}
	up := Effects(&ev, 1)
	ev.Active, ev.Status = false, "takendown"
	next, write := up.Func(archive.RepoState{Status: archive.StatusUnavailable}, true)
	if !write || !next.Active || next.AccountStatus != "" || next.Refetch != archive.RefetchReactivated {
		t.Fatalf("Func saw the mutated event: %+v", next)
	}
}
