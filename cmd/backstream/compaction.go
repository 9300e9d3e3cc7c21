package main

// This file owns `backstream compaction reset`: the recovery path of a
// halted compaction, which deletes the pass's intent (compact/intent), and
// the watermark (meta/compaction) when it is malformed, of a
// data dir no process holds open. An index whose marker (meta/index,
// meta/index_replay) is malformed it drops for the next start to rebuild
// from the rows; --reindex drops the compaction index (rec/, tomb/) in any
// case, the recovery of a malformed entry a pass named.

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
)

func compactionResetCommand() *command {
	return &command{
		name: "compaction reset",
		summary: "delete the intent of an interrupted compaction pass (the recovery of a halted compaction), " +
			"and the watermark when it is malformed, in a data dir no process holds open; the next pass recomputes what to remove; " +
			"an index whose marker is malformed is dropped, and the next start rebuilds it from the rows",
		flags: func(fs *flagSet) {
			fs.String("data-dir", "./data", "data directory")
			fs.Bool("reindex", false, "also drop the compaction index (rec/, tomb/) and mark every row unindexed, "+
				"so that the next start rebuilds it from the archive's rows before any pass: the recovery of a malformed "+
				"rec/ or tomb/ value (about 1.5 CPU-s per million rows)")
		},
		run: runCompactionReset,
	}
}

func runCompactionReset(ctx context.Context, env *cmdEnv) error {
	crash, err := crashpoint.FromEnv()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return compactionReset(env.fs.str("data-dir"), archive.Options{Logger: env.log}, env.fs.get("reindex").(bool), env.stdout, crash)
}

// compactionReset is `compaction reset` of the data dir dir, opened with
// opts (its logger; tests: its filesystem, its bound), telling out what it
// did. A read or a write of the store that never returns ends it with
// the store's disk fault (useExisting, archive.Use).
func compactionReset(dir string, opts archive.Options, reindex bool, out io.Writer, crash *crashpoint.Set) error {
	err := useExisting(dir, opts, func(s *archive.Store) error {
		return resetOn(s, dir, reindex, out, crash)
	})
	switch {
	case err == nil, !archive.OpenFailed(err): // the work's own error, or a disk fault
		return err
	case errors.Is(err, archive.ErrLocked):
		return fmt.Errorf("%s is held open by another process (a running backstream serve?): stop it first, "+
			"then run this again (%w)", dir, err)
	}
	return fmt.Errorf("open %s: %w", dir, err)
}

// resetOn is compactionReset's work on the store of dir, open read-write.
func resetOn(s *archive.Store, dir string, reindex bool, out io.Writer, crash *crashpoint.Set) error {
	// What there is, as far as it is readable: a malformed intent is what
	// this command is for, so it is reported, not refused.
	st, readErr := s.Compaction()
	dropped, hadIntent, err := s.ResetCompactionIntent()
	if err != nil {
		return fmt.Errorf("reset the compaction intent of %s: %w", dir, err)
	}
	switch {
	case dropped && hadIntent:
		fmt.Fprintf(out, "deleted the compaction intent and the malformed watermark; the next pass recomputes from the tombstones (the state read: %v)\n", readErr)
	case dropped:
		fmt.Fprintf(out, "deleted the malformed watermark (there was no compaction intent); the next pass recomputes from the tombstones (the state read: %v)\n", readErr)
	case readErr != nil:
		fmt.Fprintf(out, "deleted the compaction intent (the state read: %v)\n", readErr)
	case st.Intent != nil:
		fmt.Fprintf(out, "deleted the compaction intent to watermark %d (started %s); the watermark stays at %d\n",
			st.Intent.W, st.Intent.Started.UTC().Format("2006-01-02T15:04:05Z"), st.Watermark)
	default:
		fmt.Fprintf(out, "no compaction intent; the watermark stays at %d\n", st.Watermark)
	}
	// An index whose marker is malformed is rebuilt from the rows; a
	// malformed entry the halt named (rec/, tomb/) is found only by a pass,
	// so --reindex asks for the rebuild without one.
	dropped, err = resetIndex(out, "compaction index", "no compaction pass until then", reindex,
		s.IndexMarker, s.ResetIndex)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if dropped {
		crash.Hit(crashpoint.ResetIndex)
	}
	if _, err := resetIndex(out, "replay index", "filtered replays scan until then", false,
		s.ReplayIndexMarker, s.ResetReplayIndex); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}

// resetIndex drops an index for the next start to rebuild from the rows
// (reset) when its marker is malformed, or when force is set, and reports
// whether it did; an unreadable marker is an error.
func resetIndex(out io.Writer, name, meanwhile string, force bool, marker, reset func() (archive.IndexMarker, error)) (bool, error) {
	switch _, err := marker(); {
	case errors.Is(err, archive.ErrMalformed):
		fmt.Fprintf(out, "the %s's marker is malformed (%v)\n", name, err)
	case err != nil:
		return false, fmt.Errorf("read the %s's marker: %w", name, err)
	case !force:
		return false, nil
	}
	m, err := reset()
	if err != nil {
		return false, fmt.Errorf("reset the %s: %w", name, err)
	}
	fmt.Fprintf(out, "dropped the %s; the next start rebuilds it from rows %d to %d (%s)\n", name, m.Next, m.End-1, meanwhile)
	return true, nil
}
