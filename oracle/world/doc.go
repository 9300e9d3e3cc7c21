// Package world owns a seeded, deterministic simulated atproto network: accounts
// with did:plc DIDs, handles, K256 signing keys and real signed repositories
// (indigo atproto/repo + mst), plus a traffic generator that mutates the world
// and returns matching firehose event bodies.
//
// It is test infrastructure: production packages never import it; tests and
// the oracle network package (which serves it over HTTP/websocket) do. It does
// no I/O and starts no goroutines.
package world
