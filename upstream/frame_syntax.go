// frame_syntax.go owns the project's identifier checks: DIDs, TIDs (revs),
// NSIDs (collections) and record keys, for the frame → ops path here and
// for backfill's per-record validation. Each accepts exactly what indigo's
// atproto/syntax parser of the same name accepts (FuzzSyntaxMatchesIndigo
// compares them), without its regular expressions, which cost more than the
// rest of an op's validation together. ValidNSID and ValidRecordKey take a
// string or the bytes of one, so a caller holding bytes converts nothing.

package upstream

// ValidDID reports whether syntax.ParseDID accepts s.
func ValidDID(s string) bool {
	if len(s) == 32 && s[:8] == "did:plc:" {
		plc := true
		for i := 8; i < 32; i++ {
			if !isAlnum(s[i]) {
				plc = false
				break
			}
		}
		if plc {
			return true
		}
	}
	// ^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$, at most 2048 bytes.
	if len(s) > 2048 || len(s) < 4 || s[:4] != "did:" {
		return false
	}
	i := 4
	for i < len(s) && s[i] >= 'a' && s[i] <= 'z' {
		i++
	}
	if i == 4 || i == len(s) || s[i] != ':' {
		return false
	}
	id := s[i+1:]
	if len(id) == 0 {
		return false
	}
	for j := 0; j < len(id); j++ {
		c := id[j]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' && (c != ':' && c != '%' || j == len(id)-1) {
			return false
		}
	}
	return true
}

// ValidTID reports whether syntax.ParseTID accepts s:
// ^[234567abcdefghij][234567abcdefghijklmnopqrstuvwxyz]{12}$.
func ValidTID(s string) bool {
	if len(s) != 13 {
		return false
	}
	if c := s[0]; !(c >= '2' && c <= '7' || c >= 'a' && c <= 'j') {
		return false
	}
	for i := 1; i < 13; i++ {
		if c := s[i]; !(c >= '2' && c <= '7' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// ValidNSID reports whether syntax.ParseNSID accepts s: at most 317 bytes,
// at least three dot-separated segments of 1 to 63 bytes; the first starts
// with a letter, the middle ones with a letter or digit; both end with a
// letter or digit and may hold hyphens; the last is a letter followed by
// letters and digits.
func ValidNSID[S ~string | ~[]byte](s S) bool {
	if len(s) == 0 || len(s) > 317 {
		return false
	}
	segs := 0
	for start := 0; start <= len(s); {
		end := start
		for end < len(s) && s[end] != '.' {
			end++
		}
		seg := s[start:end]
		last := end == len(s)
		if len(seg) == 0 || len(seg) > 63 {
			return false
		}
		switch {
		case last:
			if segs < 2 || !isAlpha(seg[0]) {
				return false
			}
			for i := 1; i < len(seg); i++ {
				if !isAlnum(seg[i]) {
					return false
				}
			}
		default:
			if segs == 0 && !isAlpha(seg[0]) || !isAlnum(seg[0]) || !isAlnum(seg[len(seg)-1]) {
				return false
			}
			for i := 1; i < len(seg)-1; i++ {
				if !isAlnum(seg[i]) && seg[i] != '-' {
					return false
				}
			}
		}
		segs++
		start = end + 1
	}
	return true
}

// ValidRecordKey reports whether syntax.ParseRecordKey accepts s: 1 to 512
// bytes of [a-zA-Z0-9_~.:-], not "." or "..".
func ValidRecordKey[S ~string | ~[]byte](s S) bool {
	if len(s) == 0 || len(s) > 512 || string(s) == "." || string(s) == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' && c != '~' && c != '.' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }
