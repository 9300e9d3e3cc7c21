package subscribe

import "testing"

// FuzzTranscode compares the transcoder path with indigo's generic path on
// arbitrary bytes: same JSON or both fail (equalToReference). Seeds: the
// indigo-built corpus, every hand-made edge case, and testdata/fuzz.
//
//	go test ./subscribe -run '^$' -fuzz FuzzTranscode -fuzztime 60s
func FuzzTranscode(f *testing.F) {
	for _, r := range indigoCorpus(f) {
		f.Add(r.cbor)
	}
	for _, c := range rawCases() {
		if len(c.cbor) < 4096 { // skip the 128 KiB array cases: they slow every mutation
			f.Add(c.cbor)
		}
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		equalToReference(t, rec)
	})
}
