package oracle

// frames.go owns the atproto event-stream wire encoding: one binary websocket
// message per event, a DAG-CBOR header map followed by the DAG-CBOR body.
// DAG-CBOR orders map keys by length first, so the header is {t, op}.

import (
	"bytes"
	"fmt"

	"github.com/backstream/backstream/oracle/world"
	comatproto "github.com/bluesky-social/indigo/api/atproto"
)

// Frame message types ("t" in the header).
const (
	typeCommit   = "#commit"
	typeIdentity = "#identity"
	typeAccount  = "#account"
	typeSync     = "#sync"
	typeInfo     = "#info"
)

// Error frame names sent by the relay.
const (
	errFutureCursor    = "FutureCursor"
	errConsumerTooSlow = "ConsumerTooSlow"
	infoOutdatedCursor = "OutdatedCursor"
)

// cborText appends a DAG-CBOR text string.
func cborText(b []byte, s string) []byte {
	b = cborHead(b, 3, uint64(len(s)))
	return append(b, s...)
}

// cborHead appends a CBOR major type header with the minimal argument width.
func cborHead(b []byte, major byte, v uint64) []byte {
	m := major << 5
	switch {
	case v < 24:
		return append(b, m|byte(v))
	case v <= 0xff:
		return append(b, m|24, byte(v))
	case v <= 0xffff:
		return append(b, m|25, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(b, m|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, m|27, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// messageHeader returns the header {t: typ, op: 1}.
func messageHeader(typ string) []byte {
	b := []byte{0xa2}
	b = cborText(b, "t")
	b = cborText(b, typ)
	b = cborText(b, "op")
	return append(b, 0x01)
}

// errorFrame returns a complete error frame: header {op: -1}, body {error, message}.
func errorFrame(name, message string) []byte {
	b := []byte{0xa1}
	b = cborText(b, "op")
	b = append(b, 0x20) // -1
	b = append(b, 0xa2)
	b = cborText(b, "error")
	b = cborText(b, name)
	b = cborText(b, "message")
	return cborText(b, message)
}

// infoFrame returns an #info frame.
func infoFrame(name, message string) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(messageHeader(typeInfo))
	info := comatproto.SyncSubscribeRepos_Info{Name: name}
	if message != "" {
		info.Message = &message
	}
	if err := info.MarshalCBOR(&buf); err != nil {
		return nil, fmt.Errorf("oracle: encode #info: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeEvent sets seq on ev's body and returns its frame and message type.
func encodeEvent(ev world.Event, seq int64) ([]byte, string, error) {
	var buf bytes.Buffer
	var typ string
	var err error
	switch {
	case ev.Commit != nil:
		typ = typeCommit
		ev.Commit.Seq = seq
		buf.Write(messageHeader(typ))
		err = ev.Commit.MarshalCBOR(&buf)
	case ev.Identity != nil:
		typ = typeIdentity
		ev.Identity.Seq = seq
		buf.Write(messageHeader(typ))
		err = ev.Identity.MarshalCBOR(&buf)
	case ev.Account != nil:
		typ = typeAccount
		ev.Account.Seq = seq
		buf.Write(messageHeader(typ))
		err = ev.Account.MarshalCBOR(&buf)
	case ev.Sync != nil:
		typ = typeSync
		ev.Sync.Seq = seq
		buf.Write(messageHeader(typ))
		err = ev.Sync.MarshalCBOR(&buf)
	default:
		return nil, "", fmt.Errorf("oracle: encode event for %s: %w", ev.DID, ErrEmptyEvent)
	}
	if err != nil {
		return nil, "", fmt.Errorf("oracle: encode %s for %s: %w", typ, ev.DID, err)
	}
	return buf.Bytes(), typ, nil
}

// decodeEvent decodes a frame produced by encodeEvent back into an Emitted.
func decodeEvent(f frame) (Emitted, error) {
	hl := len(messageHeader(f.typ))
	r := bytes.NewReader(f.data[hl:])
	out := Emitted{Seq: f.seq}
	out.Invalid = f.invalid
	var err error
	switch f.typ {
	case typeCommit:
		out.Commit = new(comatproto.SyncSubscribeRepos_Commit)
		err = out.Commit.UnmarshalCBOR(r)
		out.DID = out.Commit.Repo
	case typeIdentity:
		out.Identity = new(comatproto.SyncSubscribeRepos_Identity)
		err = out.Identity.UnmarshalCBOR(r)
		out.DID = out.Identity.Did
	case typeAccount:
		out.Account = new(comatproto.SyncSubscribeRepos_Account)
		err = out.Account.UnmarshalCBOR(r)
		out.DID = out.Account.Did
	case typeSync:
		out.Sync = new(comatproto.SyncSubscribeRepos_Sync)
		err = out.Sync.UnmarshalCBOR(r)
		out.DID = out.Sync.Did
	default:
		err = fmt.Errorf("unknown type %q", f.typ)
	}
	if err != nil {
		return Emitted{}, fmt.Errorf("oracle: decode seq %d: %w", f.seq, err)
	}
	return out, nil
}
