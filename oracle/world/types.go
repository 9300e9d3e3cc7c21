package world

import (
	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/ipfs/go-cid"
)

// TrafficMode selects which mutations a Traffic generator may produce.
type TrafficMode string

const (
	// TrafficBasic produces record writes, handle changes, deactivation and
	// reactivation of build-time-active accounts, and account deletions.
	TrafficBasic TrafficMode = "basic"
	// TrafficFull adds repo resets (#sync) and reactivation of accounts that
	// were inactive at build time.
	TrafficFull TrafficMode = "full"
)

// Config describes a world. Everything derives from Seed.
type Config struct {
	Seed        int64 // everything (DIDs, keys, handles, records, initial statuses, traffic choices) derives from it
	Accounts    int   // number of accounts
	RecordsMean int   // mean records per account (skewed distribution: most small, a few huge)
	Hosts       int   // number of PDS hosts; accounts are spread over them (index 0..Hosts-1)
	// WebDIDs is how many accounts (the last by index) are did:web
	// (did:web:<WebHost(idx)>) instead of did:plc; 0 (the default) keeps
	// every world built before it unchanged.
	WebDIDs int
}

// Status values of an account ("" means active).
const (
	StatusActive      = ""
	StatusDeactivated = "deactivated"
	StatusTakendown   = "takendown"
	StatusSuspended   = "suspended"
	StatusDeleted     = "deleted"
)

// Account is a value snapshot of one account.
type Account struct {
	DID                string  // did:plc:<24 base32 chars>
	Handle             string  //
	Host               int     // PDS host index
	Active             bool    //
	Status             string  // StatusActive when Active
	Rev                string  // current commit rev (TID)
	Head               cid.Cid // current commit CID
	Data               cid.Cid // current MST root (commit.data)
	Records            int     // current record count
	PublicKeyMultibase string  // the #atproto signing key (atcrypto PublicKey.Multibase())
}

// Event is one firehose event produced by a mutation. Exactly one of the four
// body pointers is set. Seq fields are 0; Time fields are RFC 3339.
type Event struct {
	DID string
	// Invalid is "" for an event the world applied. A deliberately invalid
	// one-off #commit (InvalidRevCommit, InvalidPathCommit) carries the
	// Reason* it was built to fail; the world did not apply it, so a
	// consumer must reject it and a fold of the firehose must skip it.
	Invalid  string
	Commit   *comatproto.SyncSubscribeRepos_Commit
	Identity *comatproto.SyncSubscribeRepos_Identity
	Account  *comatproto.SyncSubscribeRepos_Account
	Sync     *comatproto.SyncSubscribeRepos_Sync
}

// Type returns the firehose message type of the event: "#commit",
// "#identity", "#account" or "#sync" ("" for a zero Event).
func (e Event) Type() string {
	switch {
	case e.Commit != nil:
		return "#commit"
	case e.Identity != nil:
		return "#identity"
	case e.Account != nil:
		return "#account"
	case e.Sync != nil:
		return "#sync"
	}
	return ""
}

func identityBody(did, handle string) *comatproto.SyncSubscribeRepos_Identity {
	return &comatproto.SyncSubscribeRepos_Identity{Did: did, Handle: &handle, Time: now()}
}

func accountBody(did, status string) *comatproto.SyncSubscribeRepos_Account {
	body := &comatproto.SyncSubscribeRepos_Account{Did: did, Active: status == StatusActive, Time: now()}
	if status != StatusActive {
		body.Status = &status
	}
	return body
}
