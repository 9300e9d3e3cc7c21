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
// merge for upstream trouble: a cursor loop or exhausted retries end
// discovery with a warning (M8). Only a store or writer failure is
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
		page, err := listPage(ctx, cfg.Source, cursor)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			cfg.Logger.Warn("discovery: listRepos keeps failing; discovery ends here, merge completes", "pages", pages, "err", err)
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

// listPage fetches one page, retrying any error discoveryRetries times,
// 0.5 s doubling (internal/backoff's jitter, capped at 16 s; a longer
// Retry-After wins). It returns the last error once they are spent, with no
// wait after the last attempt.
func listPage(ctx context.Context, src upstream.RepoSource, cursor string) (upstream.Page, error) {
	bo := backoff.Policy{Base: 500 * time.Millisecond, Max: 16 * time.Second}
	for retry := 0; ; retry++ {
		p, err := src.ListRepos(ctx, cursor, 1000)
		if err == nil || retry == discoveryRetries {
			return p, err
		}
		wait := max(bo.Draw(retry, nil), upstream.RetryAfter(err))
		if err := backoff.Sleep(ctx, wait); err != nil {
			return p, err
		}
	}
}
