package upstream

// cursors.go owns what every listing of upstream (listRepos, listHosts)
// needs to tell that a cursor came back: the set of cursors it has been at.

import "crypto/sha256"

// CursorSet is the cursors a listing has been at, so that one repeating
// any of them, a loop, is seen however long the cycle: each is held as 16
// bytes of its SHA-256 (a cursor may be 64 KiB). The zero value is empty.
type CursorSet struct {
	seen map[[16]byte]struct{}
}

// Repeats adds c to the set and reports whether it was there already. ""
// (a listing's start, or its end) never repeats.
func (s *CursorSet) Repeats(c string) bool {
	if c == "" {
		return false
	}
	if s.seen == nil {
		s.seen = map[[16]byte]struct{}{}
	}
	h := sha256.Sum256([]byte(c))
	k := [16]byte(h[:16])
	_, dup := s.seen[k]
	s.seen[k] = struct{}{}
	return dup
}
