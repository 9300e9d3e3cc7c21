// Package check holds the oracle's ground-truth checks over an archive: the
// fold of the archived stream per DID against the simulated network's
// current records, per-DID rev order (D3), and strictly increasing seqs
// (not contiguous ones: compaction leaves gaps). What compaction may
// remove is Survivors' recomputation; Vanished and CompareSurvivors tell a
// gap compaction explains from a lost row.
// Tests at every level (lifecycle, process, retry, subscribe) use it, so the
// definition of "the archive is right" exists once.
package check

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/world"
	"github.com/ipfs/go-cid"
)

// Fold is the state the archived stream describes: per DID, path → CID.
type Fold map[string]map[string]string

// Apply folds one event: create/update set a record, delete removes it, an
// account "deleted" or "takendown" event clears the account (Erases: its
// content is no longer redistributed, and the archive's compaction removes
// it; a reactivation is followed by a whole-repo replacement). A sync row
// changes nothing: a replacement is archived as the rows that change the
// account. It returns an error for a row that cannot be folded (a bad CID).
func (f Fold) Apply(ev *archive.Event) error {
	recs := f[ev.DID]
	if recs == nil {
		recs = map[string]string{}
		f[ev.DID] = recs
	}
	path := ev.Collection + "/" + ev.RKey
	switch ev.Kind {
	case archive.KindCreate, archive.KindUpdate:
		c, err := cid.Cast(ev.CID)
		if err != nil {
			return fmt.Errorf("seq %d: bad cid: %w", ev.Seq, err)
		}
		recs[path] = c.String()
	case archive.KindDelete:
		delete(recs, path)
	case archive.KindAccount:
		if Erases(ev.Status) {
			clear(recs)
		}
	}
	return nil
}

// Erases reports whether an account status makes the account's records
// no longer the archive's to serve: deleted and takendown. Deactivated and
// suspended keep them.
func Erases(status string) bool {
	return status == world.StatusDeleted || status == world.StatusTakendown
}

// Stats describe an archive walk.
type Stats struct {
	Events int
	Tip    uint64
	PerDID map[string]int // rows per DID
}

// Archive folds the whole archive of s, checking as it goes that seqs
// strictly increase and that each DID's revs never go backwards (D3).
func Archive(s *archive.Store) (Fold, Stats, error) {
	it, err := s.Events(0)
	if err != nil {
		return nil, Stats{}, err
	}
	defer it.Close()
	f := Fold{}
	st := Stats{PerDID: map[string]int{}}
	last := map[string]string{}
	for it.Next() {
		ev := it.Event()
		if ev.Seq <= st.Tip {
			return nil, st, fmt.Errorf("seqs: %d after %d", ev.Seq, st.Tip)
		}
		st.Tip = ev.Seq
		st.Events++
		st.PerDID[ev.DID]++
		if ev.Rev != "" {
			if ev.Rev < last[ev.DID] {
				return nil, st, fmt.Errorf("D3: %s rev %s after %s at seq %d", ev.DID, ev.Rev, last[ev.DID], ev.Seq)
			}
			last[ev.DID] = ev.Rev
		}
		if err := f.Apply(ev); err != nil {
			return nil, st, err
		}
	}
	if err := it.Err(); err != nil {
		return nil, st, err
	}
	return f, st, nil
}

// Mismatch is one account whose folded records differ from the network's.
type Mismatch struct {
	DID                     string
	Status                  string
	Missing, Extra, Changed []string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s (%s): %d missing %v, %d extra %v, %d changed %v", m.DID, m.Status,
		len(m.Missing), head(m.Missing), len(m.Extra), head(m.Extra), len(m.Changed), head(m.Changed))
}

func head(s []string) []string {
	if len(s) > 3 {
		return s[:3]
	}
	return s
}

// Compare checks the fold against the world for every account include
// selects (nil: every active account, and deleted and taken-down accounts,
// which must fold to nothing). Deactivated and suspended accounts are
// skipped unless selected: their records are not served while inactive.
func Compare(f Fold, w *world.World, include func(world.Account) bool) (checked int, bad []Mismatch) {
	for _, acc := range w.Accounts() {
		if include != nil {
			if !include(acc) {
				continue
			}
		} else if !acc.Active && !Erases(acc.Status) {
			continue
		}
		want := map[string]string{}
		if !Erases(acc.Status) {
			for p, c := range w.Records(acc.DID) {
				want[p] = c.String()
			}
		}
		got := f[acc.DID]
		m := Mismatch{DID: acc.DID, Status: acc.Status}
		for p, c := range want {
			g, ok := got[p]
			switch {
			case !ok:
				m.Missing = append(m.Missing, p)
			case g != c:
				m.Changed = append(m.Changed, p)
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				m.Extra = append(m.Extra, p)
			}
		}
		checked++
		if len(m.Missing)+len(m.Extra)+len(m.Changed) > 0 {
			sort.Strings(m.Missing)
			sort.Strings(m.Extra)
			sort.Strings(m.Changed)
			bad = append(bad, m)
		}
	}
	return checked, bad
}

// Describe renders mismatches for a test failure (at most n).
func Describe(bad []Mismatch, n int) string {
	var b strings.Builder
	for i, m := range bad {
		if i == n {
			fmt.Fprintf(&b, "... and %d more\n", len(bad)-n)
			break
		}
		b.WriteString(m.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// FetchedOnce reports how fetched (FetchedSince of the simulated network:
// getRepo requests per DID) differs from exactly one fetch of each DID of
// want and none of any other; nil when it does not.
func FetchedOnce(fetched map[string]int, want []string) error {
	var errs []error
	if len(fetched) != len(want) {
		errs = append(errs, fmt.Errorf("getRepo for %d accounts, want exactly the %d changed: %v", len(fetched), len(want), fetched))
	}
	for _, did := range want {
		if fetched[did] != 1 {
			errs = append(errs, fmt.Errorf("getRepo %d times for changed account %s, want 1", fetched[did], did))
		}
	}
	return errors.Join(errs...)
}
