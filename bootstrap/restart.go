package bootstrap

// restart.go owns the restart pass (R7): before enumeration resumes, every
// active not_started repo becomes pending in one pass over repo/, durable
// before any page is read. Such a repo may hold partial rows; re-emitting it
// at low seqs would place it before captured events that must stay after
// it, so merge's pending pass replaces it wholesale instead.

import (
	"context"
	"fmt"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
)

// restartBatch is the number of repo mutations per unit of the pass.
const restartBatch = 1024

// pendingPass turns every active not_started repo pending and returns how
// many it changed. Inactive not_started repos stay as they are: they were
// never dispatched.
func (b *Bootstrap) pendingPass(ctx context.Context) (int, error) {
	acks := archive.NewAcks()
	submitted, changed := 0, 0
	var batch []archive.RepoUpdate
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		u := &archive.Unit{Repos: batch, Acks: acks}
		if err := b.cfg.Writer.Submit(ctx, u); err != nil {
			return fmt.Errorf("bootstrap: restart pass: %w", err)
		}
		submitted++
		batch = nil
		return nil
	}
	p := b.announceRestartPass()
	defer p.End()
	err := b.cfg.Store.ScanRepos(func(did string, st archive.RepoState) error {
		if p.Read() {
			p.Tick("changed", changed)
		}
		if st.Status != archive.StatusNotStarted || !st.Active {
			return nil
		}
		changed++
		batch = append(batch, archive.RepoUpdate{DID: did, Func: toPending})
		if len(batch) == restartBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return 0, err
	}
	if err := waitUnits(ctx, b.cfg.Writer, acks, submitted); err != nil {
		return 0, fmt.Errorf("bootstrap: restart pass: %w", err)
	}
	return changed, nil
}

// toPending is the writer-side mutation of the restart pass; it re-checks
// the state it is applied to.
func toPending(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
	if !exists || cur.Status != archive.StatusNotStarted || !cur.Active {
		return cur, false
	}
	cur.Status = archive.StatusPending
	cur.Refetch = archive.RefetchPending
	return cur, true
}

// waitUnits waits until the n units submitted to w with acks are durable
// (archive.Acks.Wait); a refused unit is an error (a bug: bootstrap's units
// are always valid), and so is w stopping or ctx ending first.
func waitUnits(ctx context.Context, w backfill.Writer, acks *archive.Acks, n int) error {
	rc, err := acks.Wait(ctx, w, n)
	for _, r := range rc {
		if r.Refused != nil {
			return fmt.Errorf("unit refused: %w", r.Refused)
		}
	}
	return err
}

// applyUnit submits u to w and waits until it is durable (waitUnits).
func applyUnit(ctx context.Context, w backfill.Writer, u *archive.Unit) error {
	acks := archive.NewAcks()
	u.Acks = acks
	if err := w.Submit(ctx, u); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return waitUnits(ctx, w, acks, 1)
}

func writerStopped(w interface{ Err() error }) error {
	if err := w.Err(); err != nil {
		return fmt.Errorf("writer stopped: %w", err)
	}
	return fmt.Errorf("writer stopped: %w", archive.ErrClosed)
}

// announceRestartPass says, before the pass reads every repo/ row (about
// 0.2 CPU-µs a repo: seconds at the network's size, the process otherwise
// silent), how many repos it reads, as meta/counts counts them, and shows
// the step in the store's startup report until the pass ends. A store
// without repos (a first start) says nothing, and its pass is logged and
// shown by nothing.
func (b *Bootstrap) announceRestartPass() *archive.StepProgress {
	c, err := b.cfg.Store.Counts()
	if err != nil || c.Total() == 0 { // unreadable counts: the writer reports them
		return archive.Unannounced()
	}
	return b.cfg.Store.Startup().Begin(b.cfg.Logger, b.cfg.Now, archive.StepAnnouncement{Step: archive.StepRestartPass,
		Line:  "bootstrap: restart pass: reading every repo/ row once before enumeration resumes (active not_started repos become pending)",
		Args:  []any{"repos", c.Total()},
		Still: "bootstrap: restart pass: still reading repo/; enumeration resumes when it ends", Total: c.Total()})
}
