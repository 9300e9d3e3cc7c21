package k256_test

import (
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/k256"
)

// BenchmarkHashAndVerify: one commit-sized signature check by atcrypto
// (pure Go) and by a prepared key (libsecp256k1 with cgo). Reports CPU-µs per
// check (process CPU); -count=6 alternates the two.
func BenchmarkHashAndVerify(b *testing.B) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := priv.PublicKey()
	content := make([]byte, 150) // an unsigned commit's CBOR
	sig, err := priv.HashAndSign(content)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		key  atcrypto.PublicKey
	}{{"atcrypto", pub}, {"prepared", k256.Prepare(pub)}} {
		b.Run(k.name, func(b *testing.B) {
			cpu0 := cputime.Process(b)
			for b.Loop() {
				if err := k.key.HashAndVerify(content, sig); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
		})
	}
}
