package world

import (
	"errors"

	"github.com/ipfs/go-cid"
)

var errTODO = errors.New("world: not implemented yet")

// World is a deterministic simulated atproto network.
type World struct {
	cfg Config
}

// Build creates the world deterministically from cfg.Seed.
func Build(cfg Config) (*World, error) { return &World{cfg: cfg}, errTODO }

// Config returns the configuration the world was built from.
func (w *World) Config() Config { return w.cfg }

// Accounts returns every account ever created (including deleted), sorted by DID.
func (w *World) Accounts() []Account { return nil }

// Account returns a snapshot of one account.
func (w *World) Account(did string) (Account, bool) { return Account{}, false }

// RepoCAR returns the current repo as CAR v1 bytes.
func (w *World) RepoCAR(did string) ([]byte, Account, error) { return nil, Account{}, errTODO }

// Records returns "collection/rkey" -> record CID for the current state.
func (w *World) Records(did string) map[string]cid.Cid { return nil }

// RecordBytes returns the current CBOR of one record.
func (w *World) RecordBytes(did, path string) ([]byte, bool) { return nil, false }

// CreateRecord creates a record; rkey "" means next TID.
func (w *World) CreateRecord(did, collection, rkey string, rec map[string]any) (Event, error) {
	return Event{}, errTODO
}

// UpdateRecord replaces an existing record.
func (w *World) UpdateRecord(did, path string, rec map[string]any) (Event, error) {
	return Event{}, errTODO
}

// DeleteRecord deletes an existing record.
func (w *World) DeleteRecord(did, path string) (Event, error) { return Event{}, errTODO }

// SetHandle changes the handle and returns an #identity event.
func (w *World) SetHandle(did, handle string) (Event, error) { return Event{}, errTODO }

// SetStatus changes the account status and returns an #account event.
func (w *World) SetStatus(did, status string) (Event, error) { return Event{}, errTODO }

// ResetRepo replaces the repo contents and returns a #sync event.
func (w *World) ResetRepo(did string, records int) (Event, error) { return Event{}, errTODO }

// Traffic generates a deterministic stream of mutations.
type Traffic struct {
	w    *World
	mode TrafficMode
	seed int64
}

// NewTraffic returns a traffic generator over w.
func (w *World) NewTraffic(mode TrafficMode, seed int64) *Traffic {
	return &Traffic{w: w, mode: mode, seed: seed}
}

// Next applies one mutation and returns its event.
func (t *Traffic) Next() (Event, error) { return Event{}, errTODO }
