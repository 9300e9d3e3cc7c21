package upstream

import (
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// syntaxCases are inputs on every edge of the four grammars; each is checked
// against indigo's parser, so the table needs no expected column.
var syntaxCases = []string{
	"", ".", "..", "a", "did:", "did:plc:", "did:plc:abc", "did:plc:ewvi7nxzyoun6zhxrhs64oiz",
	"did:plc:EWVI7NXZYOUN6ZHXRHS64OIZ", "did:plc:ewvi7nxzyoun6zhxrhs64oi!", "did:plc:ewvi7nxzyoun6zhxrhs64oiz:",
	"did:web:example.com", "did:web:example.com:", "did:web:example.com%", "did:web:ex%20ample.com",
	"did:web:a:b:c", "did:Web:example.com", "did:w3b:x", "did::x", "did:web:", "DID:plc:abc", "did:plc",
	"did:web:example.com#frag", "did:web:example.com/", "did:key:zQ3sh", "did:a:_", "did:a:~",
	"did:web:" + strings.Repeat("a", 2040), "did:web:" + strings.Repeat("a", 2041),
	"3jzfcijpj2z2a", "3jzfcijpj2z2", "3jzfcijpj2z2aa", "kjzfcijpj2z2a", "jjzfcijpj2z2a", "1jzfcijpj2z2a",
	"3jzfcijpj2z21", "3JZFCIJPJ2Z2A", "3jzfcijpj2z2_", "22222222222222"[:13], "7zzzzzzzzzzzz", "8zzzzzzzzzzzz",
	"app.bsky.feed.post", "app.bsky", "app.bsky.", ".app.bsky", "app..bsky.post", "app.bsky.feed.1post",
	"app.bsky.feed.post#main", "1app.bsky.post", "a-p.b-s.c", "a-.b.c", "a.-b.c", "a.b-.c", "a.b.c-d",
	"a.b.c9", "a.9.c", "a.b.c", "A.B.C", "a.b", "a.b.c.d.e", "com.example.fooBar", "app.bsky.feed.post/x",
	strings.Repeat("a", 63) + ".b.c", strings.Repeat("a", 64) + ".b.c", "a.b." + strings.Repeat("c", 63),
	"a.b." + strings.Repeat("c", 64), strings.Repeat("a.", 158) + "b", strings.Repeat("a.", 159) + "b",
	"self", "a/b", "has space", "a~b_c:d-e.f", "a\nb", "é", "a\x00", strings.Repeat("k", 512), strings.Repeat("k", 513),
}

func TestSyntaxMatchesIndigo(t *testing.T) {
	for _, s := range syntaxCases {
		checkSyntax(t, s)
	}
}

// FuzzSyntaxMatchesIndigo: each fast check accepts exactly what its
// atproto/syntax parser accepts. Seeds: the edge cases of
// TestSyntaxMatchesIndigo. Run: go test ./upstream -fuzz FuzzSyntaxMatchesIndigo
func FuzzSyntaxMatchesIndigo(f *testing.F) {
	for _, s := range syntaxCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSyntax(t, s)
		// Grammar-shaped variants, so the fuzzer reaches deep branches
		// of each check from any input.
		checkSyntax(t, "did:"+s)
		checkSyntax(t, "did:plc:"+s)
		checkSyntax(t, "app.bsky."+s)
	})
}

func checkSyntax(t *testing.T, s string) {
	t.Helper()
	_, err := syntax.ParseDID(s)
	if got := ValidDID(s); got != (err == nil) {
		t.Errorf("ValidDID(%q) = %v, ParseDID error %v", s, got, err)
	}
	_, err = syntax.ParseTID(s)
	if got := ValidTID(s); got != (err == nil) {
		t.Errorf("ValidTID(%q) = %v, ParseTID error %v", s, got, err)
	}
	// The NSID and record-key checks also take bytes (backfill's MST keys).
	_, err = syntax.ParseNSID(s)
	if got, gotB := ValidNSID(s), ValidNSID([]byte(s)); got != (err == nil) || gotB != got {
		t.Errorf("ValidNSID(%q) = %v (bytes: %v), ParseNSID error %v", s, got, gotB, err)
	}
	_, err = syntax.ParseRecordKey(s)
	if got, gotB := ValidRecordKey(s), ValidRecordKey([]byte(s)); got != (err == nil) || gotB != got {
		t.Errorf("ValidRecordKey(%q) = %v (bytes: %v), ParseRecordKey error %v", s, got, gotB, err)
	}
}
