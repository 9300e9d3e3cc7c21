// Package churn generates deterministic random record traffic with every
// kind of supersession — creates (alone, and in stretches a download would
// archive), updates, deletes, re-creates after a delete, syncs followed by the rows that change the account, account rows of
// every status (deleted and takendown purge; deactivated and suspended do
// not), identity rows — for the compaction tests at every level. Every
// record body is unique and carries a marker (Marker), so a test can search
// raw store values for the bodies of superseded rows.
package churn

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"regexp"

	"github.com/backstream/backstream/archive"
)

// Marker matches the unique marker in every record body Traffic makes.
var Marker = regexp.MustCompile(`#[0-9]+ [0-9a-f]{16}`)

// Traffic generates deterministic random traffic over a few accounts with
// every kind of supersession: creates, updates, deletes, re-creates after a
// delete, syncs followed by the rows that change the account, account rows of
// every status, identity rows. Revs increase globally, so every row passes
// the ratchet.
type Traffic struct {
	rng   *rand.Rand
	accts []*acct
	rev   int
	n     int
}

type acct struct {
	did        string
	live, dead []string // "collection\x00rkey"
}

var collections = []string{"app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.feed.postgate"}

func New(seed uint64, accounts int) *Traffic {
	tr := &Traffic{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := 0; i < accounts; i++ {
		did := fmt.Sprintf("did:plc:tr%03d", i)
		if i%7 == 1 {
			did = tr.accts[i-1].did + "x" // one DID a prefix of another
		}
		tr.accts = append(tr.accts, &acct{did: did})
	}
	return tr
}

func (tr *Traffic) nextRev() string {
	tr.rev++
	return fmt.Sprintf("3m%011d", tr.rev)
}

// body is a record whose CBOR is unique to this row: it carries a marker
// Marker matches (a raw-value search looks for it).
func (tr *Traffic) body(did, id string) []byte {
	tr.n++
	text := fmt.Sprintf("body %s %q #%d %016x", did, id, tr.n, tr.rng.Uint64())
	b := []byte{0xa1, 0x64, 't', 'e', 'x', 't', 0x78, byte(len(text))}
	return append(b, text...)
}

func (tr *Traffic) record(kind archive.Kind, a *acct, id string) archive.Event {
	coll, rkey, _ := bytes.Cut([]byte(id), []byte{0})
	ev := archive.Event{Kind: kind, DID: a.did, Collection: string(coll), RKey: string(rkey), Rev: tr.nextRev(), Source: archive.SourceLive}
	if kind != archive.KindDelete {
		ev.Record = tr.body(a.did, id)
		sum := sha256.Sum256(ev.Record) // the record's real CID (dag-cbor, sha2-256)
		ev.CID = append([]byte{0x01, 0x71, 0x12, 0x20}, sum[:]...)
	}
	return ev
}

func (tr *Traffic) newID() string {
	tr.n++
	return fmt.Sprintf("%s\x003l%011d", collections[tr.rng.IntN(len(collections))], tr.n)
}

func pick(rng *rand.Rand, s []string) (string, []string) {
	i := rng.IntN(len(s))
	v := s[i]
	s[i] = s[len(s)-1]
	return v, s[:len(s)-1]
}

// Unit returns the next unit: one operation of one account.
func (tr *Traffic) Unit() []archive.Event {
	a := tr.accts[tr.rng.IntN(len(tr.accts))]
	r := tr.rng.IntN(100)
	switch {
	case r < 50 || len(a.live) == 0 && r < 75:
		id := tr.newID()
		a.live = append(a.live, id)
		return []archive.Event{tr.record(archive.KindCreate, a, id)}
	case r < 65:
		id := a.live[tr.rng.IntN(len(a.live))]
		return []archive.Event{tr.record(archive.KindUpdate, a, id)}
	case r < 75:
		var id string
		id, a.live = pick(tr.rng, a.live)
		a.dead = append(a.dead, id)
		return []archive.Event{tr.record(archive.KindDelete, a, id)}
	case r < 80 && len(a.dead) > 0:
		var id string
		id, a.dead = pick(tr.rng, a.dead)
		a.live = append(a.live, id)
		return []archive.Event{tr.record(archive.KindCreate, a, id)}
	case r < 85:
		return []archive.Event{{Kind: archive.KindIdentity, DID: a.did, Handle: fmt.Sprintf("h%d.test", tr.rng.IntN(1000)), Source: archive.SourceLive}}
	case r < 96:
		statuses := []string{"deactivated", "suspended", "deleted", "takendown", ""}
		st := statuses[tr.rng.IntN(len(statuses))]
		if archive.AccountStatusPurges(st) {
			a.dead, a.live = append(a.dead, a.live...), nil
		}
		return []archive.Event{{Kind: archive.KindAccount, DID: a.did, Active: st == "", Status: st, Source: archive.SourceLive}}
	case r < 98:
		return tr.stretch(a)
	default:
		// A sync, then the replacement's rows: what changes the account
		// (its unchanged records stay current from the rows before).
		// (The replacement's own sync row: an upstream #sync archives none.)
		evs := []archive.Event{{Kind: archive.KindSync, DID: a.did, Rev: tr.nextRev(), Source: archive.SourceRetry}}
		for i := tr.rng.IntN(4); i > 0; i-- {
			switch r := tr.rng.IntN(3); {
			case r == 0 && len(a.live) > 0:
				var id string
				id, a.live = pick(tr.rng, a.live)
				a.dead = append(a.dead, id)
				evs = append(evs, tr.record(archive.KindDelete, a, id))
			case r == 1 && len(a.live) > 0:
				evs = append(evs, tr.record(archive.KindUpdate, a, a.live[tr.rng.IntN(len(a.live))]))
			default:
				var id string
				if len(a.dead) > 0 && tr.rng.IntN(2) == 0 {
					id, a.dead = pick(tr.rng, a.dead)
				} else {
					id = tr.newID()
				}
				a.live = append(a.live, id)
				evs = append(evs, tr.record(archive.KindCreate, a, id))
			}
		}
		return evs
	}
}

// stretch is a unit of 4 to 12 creates of one collection in rkey order, as
// a repo's download archives them (SourceBackfill): the record index folds
// such a stretch into one run entry (a live commit's creates it does not).
func (tr *Traffic) stretch(a *acct) []archive.Event {
	coll := collections[tr.rng.IntN(len(collections))]
	var evs []archive.Event
	for i := 4 + tr.rng.IntN(9); i > 0; i-- {
		tr.n++
		id := fmt.Sprintf("%s\x003l%011d", coll, tr.n)
		a.live = append(a.live, id)
		ev := tr.record(archive.KindCreate, a, id)
		ev.Source = archive.SourceBackfill
		evs = append(evs, ev)
	}
	return evs
}

// Units returns the next n units.
func (tr *Traffic) Units(n int) [][]archive.Event {
	out := make([][]archive.Event, n)
	for i := range out {
		out[i] = tr.Unit()
	}
	return out
}
