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
	dir := env.fs.str("data-dir")
	crash, err := crashpoint.FromEnv()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	s, err := openExisting(dir, archive.Options{Logger: env.log})
	if errors.Is(err, archive.ErrLocked) {
		return fmt.Errorf("%s is held open by another process (a running backstream serve?): stop it first, "+
			"then run this again (%w)", dir, err)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer s.Close()
	// What there is, as far as it is readable: a malformed intent is what
	// this command is for, so it is reported, not refused.
	st, readErr := s.Compaction()
	dropped, err := s.ResetCompactionIntent()
	if err != nil {
		return fmt.Errorf("reset the compaction intent of %s: %w", dir, err)
	}
	switch {
	case dropped:
		fmt.Fprintf(env.stdout, "deleted the compaction intent and the malformed watermark; the next pass recomputes from the tombstones (the state read: %v)\n", readErr)
	case readErr != nil:
		fmt.Fprintf(env.stdout, "deleted the compaction intent (the state read: %v)\n", readErr)
	case st.Intent != nil:
		fmt.Fprintf(env.stdout, "deleted the compaction intent to watermark %d (started %s); the watermark stays at %d\n",
			st.Intent.W, st.Intent.Started.UTC().Format("2006-01-02T15:04:05Z"), st.Watermark)
	default:
		fmt.Fprintf(env.stdout, "no compaction intent; the watermark stays at %d\n", st.Watermark)
	}
	// An index whose marker is malformed is rebuilt from the rows; a
	// malformed entry the halt named (rec/, tomb/) is found only by a pass,
	// so --reindex asks for the rebuild without one.
	reindex := env.fs.get("reindex").(bool)
	switch _, err := s.IndexMarker(); {
	case errors.Is(err, archive.ErrMalformed):
		reindex = true
	case err != nil:
		return fmt.Errorf("read the index marker of %s: %w", dir, err)
	}
	if reindex {
		m, err := s.ResetIndex()
		if err != nil {
			return fmt.Errorf("reset the compaction index of %s: %w", dir, err)
		}
		fmt.Fprintf(env.stdout, "dropped the compaction index; the next start rebuilds it from rows %d to %d before its first pass\n", m.Next, m.End-1)
		crash.Hit(crashpoint.ResetIndex)
	}
	switch _, err := s.ReplayIndexMarker(); {
	case errors.Is(err, archive.ErrMalformed):
		m, err := s.ResetReplayIndex()
		if err != nil {
			return fmt.Errorf("reset the replay index of %s: %w", dir, err)
		}
		fmt.Fprintf(env.stdout, "the replay index marker was malformed: dropped the replay index; the next start rebuilds it from rows %d to %d (filtered replays scan until then)\n", m.Next, m.End-1)
	case err != nil:
		return fmt.Errorf("read the replay index marker of %s: %w", dir, err)
	}
	return s.Close()
}
