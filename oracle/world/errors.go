package world

import "errors"

// ErrUnknownDID is returned for a DID the world never created.
var ErrUnknownDID = errors.New("world: unknown DID")

// ErrAccountDeleted is returned when a deleted account is mutated or its repo
// requested; a deleted account never comes back.
var ErrAccountDeleted = errors.New("world: account deleted")

// ErrAccountInactive is returned when a commit or repo reset is attempted on
// an account that is not active (inactive accounts get no commits).
var ErrAccountInactive = errors.New("world: account inactive")

// ErrRecordExists is returned by CreateRecord when the path already holds a record.
var ErrRecordExists = errors.New("world: record already exists")

// ErrRecordNotFound is returned by UpdateRecord and DeleteRecord for a missing path.
var ErrRecordNotFound = errors.New("world: record not found")

// ErrUnchanged is returned by UpdateRecord when the new record has the same
// CID as the current one (an update must change the record).
var ErrUnchanged = errors.New("world: record unchanged")

// ErrInvalidStatus is returned by SetStatus for a status outside the Status* set.
var ErrInvalidStatus = errors.New("world: invalid account status")

// ErrInvalidConfig is returned by Build for a configuration it cannot honour.
var ErrInvalidConfig = errors.New("world: invalid config")

// ErrNoEligibleAccount is returned by Traffic.Next when no account can take
// any mutation (every account deleted or inactive).
var ErrNoEligibleAccount = errors.New("world: no eligible account for traffic")

// ErrNoValidOps is returned by RetryValidOps when the commit has no create
// under a valid repo path to retry.
var ErrNoValidOps = errors.New("world: no valid ops to retry")
