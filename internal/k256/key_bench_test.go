package k256_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/backstream/backstream/internal/k256"
)

// processCPU is the process's CPU time so far (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
			cpu0 := processCPU(b)
			for b.Loop() {
				if err := k.key.HashAndVerify(content, sig); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
