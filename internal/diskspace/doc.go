// Package diskspace reads how much space a filesystem has left and owns the
// free-space floor below which backstream stops writing to it: the store's
// ingest and the scratch spills of getRepo bodies both check the same floor,
// so an operator sets one number (--min-free) for the data volume.
//
// A Space is a reading of statfs(2) on a path; Floor turns the operator's
// setting (or the default: the smaller of 1 GiB and 2 % of the volume) into
// bytes for that volume.
package diskspace
