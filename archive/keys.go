package archive

// This file owns the key layout of the store. Every key the
// project writes is built here; nothing else concatenates key bytes.

import (
	"encoding/binary"
	"fmt"
)

// Fixed keys.
var (
	KeyInstance           = []byte("meta/instance")
	KeyPhase              = []byte("meta/phase")
	KeyPhaseEnteredAt     = []byte("meta/phase_entered_at")
	KeyBackfillStartedAt  = []byte("meta/backfill_started_at")
	KeyBackfillCompleteAt = []byte("meta/backfill_completed_at")
	KeyRelay              = []byte("meta/relay")
	KeyCounts             = []byte("meta/counts")
	KeyCursorRelay        = []byte("cursor/relay")
	KeyCursorListRepos    = []byte("cursor/listrepos")
	KeyCursorListLast     = []byte("cursor/listrepos_last")
	KeyCursorMerge        = []byte("cursor/merge")

	// KeyRelaySilentAt: capture's wait for a first frame expired while the
	// relay had sent nothing, so cursor/relay is absent because there was
	// never a position, not because one was lost (Store.MarkRelaySilent).
	KeyRelaySilentAt = []byte("meta/relay_silent_at")
)

// KeyCursorSinkNATS is the NATS sink's position: [0x01][uint64 LE], the
// highest seq whose publish the stream acknowledged with none missing
// below it. A unit Put like the listRepos cursors (it is no seq cursor of
// the writer's: the sink only reads the archive).
var KeyCursorSinkNATS = []byte("cursor/sink/nats")

// Key prefixes of the keyed families.
var (
	PrefixRepo = []byte("repo/")
	PrefixRev  = []byte("rev/")
	PrefixHost = []byte("host/")
	// PrefixHostRank indexes the hosts with failed repos by their failure
	// count, highest first: the top-N is a read of N keys, never a scan of
	// host/ (S3).
	PrefixHostRank = []byte("hostrank/")
	PrefixEvent    = []byte("ev/")
	PrefixCapture  = []byte("cap/")
	PrefixCursor   = []byte("cursor/")
	PrefixMeta     = []byte("meta/")
)

// dataPrefixes are the families whose presence means a store holds archived
// data (the startup guard refuses such a store without an identity).
var dataPrefixes = [][]byte{PrefixEvent, PrefixCapture, PrefixRev, PrefixRepo}

func withSuffix(prefix []byte, s string) []byte {
	k := make([]byte, 0, len(prefix)+len(s))
	k = append(k, prefix...)
	return append(k, s...)
}

// RepoKey is repo/<did>.
func RepoKey(did string) []byte { return withSuffix(PrefixRepo, did) }

// RevKey is rev/<did>, the per-account ratchet.
func RevKey(did string) []byte { return withSuffix(PrefixRev, did) }

// HostKey is host/<host>.
func HostKey(host string) []byte { return withSuffix(PrefixHost, host) }

// HostRankKey is hostrank/<^failures as 8 bytes big-endian><host>: keys
// sort by failures descending, then by host.
func HostRankKey(failures uint64, host string) []byte {
	k := make([]byte, 0, len(PrefixHostRank)+8+len(host))
	k = append(k, PrefixHostRank...)
	k = binary.BigEndian.AppendUint64(k, ^failures)
	return append(k, host...)
}

// ParseHostRankKey is the inverse of HostRankKey.
func ParseHostRankKey(key []byte) (host string, failures uint64, err error) {
	if len(key) <= len(PrefixHostRank)+8 || string(key[:len(PrefixHostRank)]) != string(PrefixHostRank) {
		return "", 0, fmt.Errorf("archive: key %q is not a host rank key", key)
	}
	return string(key[len(PrefixHostRank)+8:]), ^binary.BigEndian.Uint64(key[len(PrefixHostRank):]), nil
}

// EventKey is ev/<seq as 8 bytes big-endian>, so keys sort by seq.
func EventKey(seq uint64) []byte { return seqKey(PrefixEvent, seq) }

// CaptureKey is cap/<seq as 8 bytes big-endian>.
func CaptureKey(seq uint64) []byte { return seqKey(PrefixCapture, seq) }

func seqKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], seq)
	return k
}

// ParseSeqKey returns the seq of an ev/ or cap/ key with the given prefix.
func ParseSeqKey(prefix, key []byte) (uint64, error) {
	if len(key) != len(prefix)+8 || string(key[:len(prefix)]) != string(prefix) {
		return 0, fmt.Errorf("archive: key %q is not a %q seq key", key, prefix)
	}
	return binary.BigEndian.Uint64(key[len(prefix):]), nil
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
