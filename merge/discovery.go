package merge

// discovery.go owns post-bootstrap discovery (M6): list repos again from the
// last non-empty listRepos cursor and record every DID the store does not
// know as a failed repo due for a fetch (the retry runner's candidate).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
)

// discoveryRetries bounds the retries of one discovery page.
const discoveryRetries = 5

// Discover lists repos from the last non-empty listRepos cursor and records
// every DID the store does not know as a failed repo due now. It never fails
// merge for upstream trouble: a cursor loop ends discovery with a warning,
// a page it cannot use (retries spent, a cursor over 64 KiB after the
// page's repos are recorded) with an error log and a count (M8). Only a store or writer failure is
// returned. A nil cfg.Source discovers nothing.
func Discover(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.Source == nil {
		return nil
	}
	cursor := ""
	last, err := cfg.Store.ListCursor(true)
	switch {
	case err == nil:
		cursor = last.Cursor
	case !errors.Is(err, archive.ErrNotFound):
		return err
	}
	seen := map[string]bool{}
	acks := archive.NewAcks()
	pending, found := 0, 0
	for pages := 0; ; pages++ {
		if seen[cursor] && cursor != "" {
			cfg.Logger.Warn("discovery: the relay's listRepos cursor repeats; discovery ends here", "pages", pages)
			break
		}
		seen[cursor] = true
		page, err := ListPage(ctx, cfg.Source, cursor)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			cut(cfg, upstream.CutReason(err), pages, err)
			break
		}
		var ups []archive.RepoUpdate
		now := cfg.Now().UnixMicro()
		for _, e := range page.Repos {
			active, status := e.Active, e.Status
			ups = append(ups, archive.RepoUpdate{DID: e.DID, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
				if exists {
					return cur, false
				}
				return archive.RepoState{
					Status: archive.StatusFailed, Active: active, AccountStatus: status,
					Refetch: archive.RefetchDiscovered, NextAttemptUS: now, ErrClass: "discovered",
				}, true
			}})
		}
		if len(ups) > 0 {
			if err := cfg.Writer.Submit(ctx, &archive.Unit{Repos: ups, Acks: acks}); err != nil {
				return err
			}
			pending++
			found += len(ups)
		}
		if page.CursorRefused > 0 {
			cut(cfg, upstream.CutCursorTooLong, pages+1, fmt.Errorf("a cursor of %d bytes", page.CursorRefused))
			break
		}
		if page.Cursor == "" || page.Cursor == cursor {
			break
		}
		cursor = page.Cursor
	}
	rc, err := acks.Wait(ctx, cfg.Writer, pending)
	for _, r := range rc {
		if r.Refused != nil {
			return fmt.Errorf("merge: discovery: unit refused: %w", r.Refused)
		}
		cfg.Crash.Hit(crashpoint.DiscoveryPage)
	}
	if err != nil {
		return fmt.Errorf("merge: discovery: %w", err)
	}
	cfg.Logger.Info("discovery finished", "listed", found)
	return nil
}

// cut ends discovery at a page it cannot use, once: counted by reason and
// logged. Merge completes; the accounts the relay would list after that
// page are not recorded (the live firehose still archives their events).
func cut(cfg Config, reason string, pages int, err error) {
	cfg.Metrics.discoveryCut(reason)
	cfg.Logger.Error("discovery: a listRepos page cannot be used; discovery ends here, merge completes; accounts listed after it are not recorded",
		"reason", reason, "pages", pages, "err", err)
}

// ListPage fetches one listRepos page (discovery, the repair pass), retrying a transient or rate-limited failure
// discoveryRetries times, 0.5 s doubling (internal/backoff's jitter, capped
// at 16 s; a longer Retry-After wins). It returns the last error once they
// are spent, with no wait after the last attempt, and any other error at
// once: a malformed or oversized page or a 4xx is the same bytes again.
func ListPage(ctx context.Context, src upstream.RepoSource, cursor string) (upstream.Page, error) {
	bo := backoff.Policy{Base: 500 * time.Millisecond, Max: 16 * time.Second}
	for retry := 0; ; retry++ {
		p, err := src.ListRepos(ctx, cursor, 1000)
		if err == nil || retry == discoveryRetries || !retryable(err) {
			return p, err
		}
		wait := max(bo.Draw(retry, nil), upstream.RetryAfter(err))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return p, err
		}
	}
}

// retryable says whether the same listRepos request may answer differently
// soon: a transient failure or a 429.
func retryable(err error) bool {
	c := upstream.Classify(err)
	return c == upstream.ClassTransient || c == upstream.ClassRateLimited
}
