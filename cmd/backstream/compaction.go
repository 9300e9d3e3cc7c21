package main

// This file owns `backstream compaction reset`: the recovery path of a
// halted compaction, which deletes the pass's intent (compact/intent), and
// the watermark (meta/compaction) when it is malformed, of a
// data dir no process holds open.

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstream/backstream/archive"
)

func compactionResetCommand() *command {
	return &command{
		name: "compaction reset",
		summary: "delete the intent of an interrupted compaction pass (the recovery of a halted compaction), " +
			"and the watermark when it is malformed, in a data dir no process holds open; the next pass recomputes what to remove",
		flags: func(fs *flagSet) {
			fs.String("data-dir", "./data", "data directory")
		},
		run: runCompactionReset,
	}
}

func runCompactionReset(ctx context.Context, env *cmdEnv) error {
	dir := env.fs.str("data-dir")
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
	return s.Close()
}
