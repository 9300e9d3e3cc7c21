package firehose

// effects.go owns the repo side effects of firehose rows (M8): the same function serves the live consumer and the merge walker, so a
// captured row has exactly the effect it would have had live.

import "github.com/backstream/backstream/archive"

// Effects returns the repo mutation that ev implies, or nil when it implies
// none. Only #account and #sync rows have effects; both are conditional on
// the repo's current state, so they are expressed as archive.RepoUpdate.Func
// and decided on the writer goroutine, atomically with the row itself:
//
//   - #account, repo known: Active and AccountStatus take the event's values.
//     If the event says active and the repo is unavailable, pending, or
//     stored inactive (Active=false), the account has come back: the repo is
//     marked due for a whole-repo replacement (Refetch=RefetchReactivated,
//     NextAttemptUS=nowUS).
//   - #sync, repo known and active: due for a replacement
//     (Refetch=RefetchSync, NextAttemptUS=nowUS).
//   - an unknown repo is never created here (discovery belongs to merge,
//     the repair pass, and the writer's check of a commit's since); a
//     mutation that would change nothing is not written.
//
// The returned Func is pure: it captures ev's values (not ev) and nowUS.
func Effects(ev *archive.Event, nowUS int64) *archive.RepoUpdate {
	switch ev.Kind {
	case archive.KindAccount:
		active, status := ev.Active, ev.Status
		return &archive.RepoUpdate{DID: ev.DID, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
			return accountEffect(cur, exists, active, status, nowUS)
		}}
	case archive.KindSync:
		return &archive.RepoUpdate{DID: ev.DID, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
			return syncEffect(cur, exists, nowUS)
		}}
	}
	return nil
}

func accountEffect(cur archive.RepoState, exists, active bool, status string, nowUS int64) (archive.RepoState, bool) {
	if !exists {
		return cur, false
	}
	next := cur
	next.Active = active
	next.AccountStatus = status
	if active && (cur.Status == archive.StatusUnavailable || cur.Status == archive.StatusPending || !cur.Active) {
		next.Refetch = archive.RefetchReactivated
		next.NextAttemptUS = nowUS
	}
	return next, next != cur
}

func syncEffect(cur archive.RepoState, exists bool, nowUS int64) (archive.RepoState, bool) {
	return dueEffect(cur, exists, nowUS, archive.RefetchSync)
}

// dueEffect marks a known, active repo due now for a whole-repo
// replacement, for reason.
func dueEffect(cur archive.RepoState, exists bool, nowUS int64, reason archive.Refetch) (archive.RepoState, bool) {
	if !exists || !cur.Active {
		return cur, false
	}
	next := cur
	next.Refetch = reason
	next.NextAttemptUS = nowUS
	return next, next != cur
}
