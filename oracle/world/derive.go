package world

// derive.go owns every seeded derivation: per-purpose random streams, DIDs,
// signing keys, handles, hosts, initial statuses and repo sizes. Changing a
// salt changes every world built from a given seed.

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
)

// Salts separating the random streams; each purpose has its own so that
// changing one generator does not reshuffle the others.
const (
	saltDID     = 0x6469643a706c6301
	saltKey     = 0x6b32353600000002
	saltMeta    = 0x6d65746100000003
	saltContent = 0x636f6e7465000004
	saltSizes   = 0x73697a6573000005
	saltMutate  = 0x6d75746174650006
	saltTraffic = 0x7472616666690007
	saltHostile = 0x686f7374696c0008
)

// newRNG returns a PCG stream for (seed, salt, idx).
func newRNG(seed int64, salt, idx uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed)^salt, idx*0x9e3779b97f4a7c15+salt))
}

func seededHash(tag string, seed int64, idx, ctr uint64) [32]byte {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], uint64(seed))
	binary.BigEndian.PutUint64(b[8:], idx)
	binary.BigEndian.PutUint64(b[16:], ctr)
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write(b[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// deriveDID returns did:plc:<24 base32 chars> for account idx.
func deriveDID(seed int64, idx int) string {
	h := seededHash("world/did", seed, uint64(idx), 0)
	return "did:plc:" + lowerBase32.EncodeToString(h[:15])[:24]
}

// WebHost is the host name of account idx's did:web (Config.WebDIDs): the
// network serves its document at https://<WebHost>/.well-known/did.json.
func WebHost(idx int) string { return fmt.Sprintf("web%d.test", idx) }

// deriveKey returns the K256 signing key of account idx: SHA-256 over the
// seed, index and a counter, retried while the bytes are not a valid scalar.
func deriveKey(seed int64, idx int) (*atcrypto.PrivateKeyK256, error) {
	for ctr := uint64(0); ctr < 64; ctr++ {
		h := seededHash("world/key", seed, uint64(idx), ctr)
		k, err := atcrypto.ParsePrivateBytesK256(h[:])
		if err == nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("world: derive key %d: no valid scalar", idx)
}

var handleWords = []string{
	"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
	"mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "user",
}

// deriveHandle returns the build-time handle of account idx (unique: it
// carries the index).
func deriveHandle(rng *rand.Rand, idx int) string {
	return fmt.Sprintf("%s%d.test", handleWords[rng.IntN(len(handleWords))], idx)
}

// deriveHost spreads accounts over hosts: the first `hosts` accounts are
// pinned one per host so tiny worlds still use every host; after that host 0
// takes about half and the rest share the remainder uniformly.
func deriveHost(rng *rand.Rand, idx, hosts int) int {
	if hosts <= 1 {
		return 0
	}
	if idx < hosts {
		return idx
	}
	if rng.IntN(2) == 0 {
		return 0
	}
	return 1 + rng.IntN(hosts-1)
}

// deriveStatus returns the build-time status of account idx. Worlds of at
// least 8 accounts always hold one of each inactive status (indices 1..4);
// otherwise a few percent of each.
func deriveStatus(rng *rand.Rand, idx, accounts int) string {
	if accounts >= 8 {
		switch idx {
		case 1:
			return StatusDeactivated
		case 2:
			return StatusTakendown
		case 3:
			return StatusSuspended
		case 4:
			return StatusDeleted
		}
	}
	if idx == 0 {
		return StatusActive
	}
	switch r := rng.IntN(1000); {
	case r < 20:
		return StatusDeactivated
	case r < 30:
		return StatusTakendown
	case r < 40:
		return StatusSuspended
	case r < 60:
		return StatusDeleted
	}
	return StatusActive
}

// maxRepoRecords caps the biggest ("whale") repos.
const maxRepoRecords = 50_000

// deriveSizes returns the initial record count of every account: a few
// whales (one per 4,000 accounts, together at most 30% of all records, each
// at most maxRepoRecords) and a lognormal body scaled so the overall mean is
// cfg.RecordsMean. Deterministic from the seed.
func deriveSizes(cfg Config) []int {
	n := cfg.Accounts
	sizes := make([]int, n)
	if n == 0 || cfg.RecordsMean <= 0 {
		return sizes
	}
	rng := newRNG(cfg.Seed, saltSizes, 0)
	budget := n * cfg.RecordsMean
	whales := n / 4000
	if whales > 0 {
		per := min(budget*3/10/whales, maxRepoRecords)
		for i := 0; i < whales; i++ {
			// Whales are spread over the index space; index 0 stays small.
			idx := 1 + rng.IntN(n-1)
			for sizes[idx] != 0 {
				idx = 1 + rng.IntN(n-1)
			}
			sizes[idx] = per*2/3 + rng.IntN(per/3+1)
			budget -= sizes[idx]
		}
	}
	const sigma = 1.2
	draws := make([]float64, n)
	sum := 0.0
	for i := range draws {
		if sizes[i] != 0 {
			continue
		}
		draws[i] = math.Exp(sigma * rng.NormFloat64())
		sum += draws[i]
	}
	if sum == 0 || budget <= 0 {
		return sizes
	}
	scale := float64(budget) / sum
	for i, d := range draws {
		if d == 0 {
			continue
		}
		sizes[i] = min(int(math.Round(d*scale)), maxRepoRecords)
	}
	return sizes
}

// nextHandle returns the gen-th replacement handle of a handle: "x12.test"
// becomes "x12-g<gen>.test".
func nextHandle(base string, gen int) string {
	stem := strings.TrimSuffix(base, ".test")
	if i := strings.Index(stem, "-g"); i >= 0 {
		stem = stem[:i]
	}
	return fmt.Sprintf("%s-g%d.test", stem, gen)
}
