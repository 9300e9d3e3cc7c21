// frame.go owns the subscribeRepos wire framing: one binary websocket
// message = a DAG-CBOR header map {op, t} followed by exactly one DAG-CBOR
// body. DecodeFrame never panics on hostile input; EncodeFrame is its
// inverse, for producers in tests and the simulated network.

package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	cbg "github.com/whyrusleeping/cbor-gen"
)

// Frame header ops.
const (
	// FrameOpMessage marks a message frame; Type names its body.
	FrameOpMessage = 1
	// FrameOpError marks an error frame; the body is an ErrorFrame.
	FrameOpError = -1
)

// Frame body types (the header's t).
const (
	TypeCommit   = "#commit"
	TypeSync     = "#sync"
	TypeIdentity = "#identity"
	TypeAccount  = "#account"
	TypeInfo     = "#info"
)

// Frame sentinels.
var (
	// ErrUnknownFrameType: a well-formed message frame whose t is not one of
	// the five known types; DecodeFrame still returns its header. Skip it.
	ErrUnknownFrameType = errors.New("unknown frame type")
	// ErrInvalidFrame: the bytes are not a valid frame (bad header, unknown
	// op, undecodable body, trailing bytes).
	ErrInvalidFrame = errors.New("invalid frame")
)

// ErrorFrame is the body of an op=-1 frame, e.g. {FutureCursor, "..."}.
type ErrorFrame struct {
	Error   string
	Message string
}

// Frame is one decoded subscribeRepos message: its header and exactly one
// non-nil body pointer (for a known message type) or Error (op=-1).
type Frame struct {
	Op   int64
	Type string

	Commit   *comatproto.SyncSubscribeRepos_Commit
	Sync     *comatproto.SyncSubscribeRepos_Sync
	Identity *comatproto.SyncSubscribeRepos_Identity
	Account  *comatproto.SyncSubscribeRepos_Account
	Info     *comatproto.SyncSubscribeRepos_Info
	Error    *ErrorFrame
}

// Seq returns the upstream sequence number of a #commit, #sync, #identity or
// #account frame; ok is false for #info, error and unknown frames.
func (f *Frame) Seq() (seq int64, ok bool) {
	switch {
	case f.Commit != nil:
		return f.Commit.Seq, true
	case f.Sync != nil:
		return f.Sync.Seq, true
	case f.Identity != nil:
		return f.Identity.Seq, true
	case f.Account != nil:
		return f.Account.Seq, true
	}
	return 0, false
}

// DID returns the account a frame is about ("" for #info and error frames).
func (f *Frame) DID() string {
	switch {
	case f.Commit != nil:
		return f.Commit.Repo
	case f.Sync != nil:
		return f.Sync.Did
	case f.Identity != nil:
		return f.Identity.Did
	case f.Account != nil:
		return f.Account.Did
	}
	return ""
}

// DecodeFrame decodes one binary websocket message. Errors: an unknown t
// returns the header-only Frame and an error matching ErrUnknownFrameType;
// anything malformed returns an error matching ErrInvalidFrame. It never
// panics. The Frame shares no memory with data (consumers reuse their read
// buffer; TestDecodeFrameDoesNotAliasInput).
func DecodeFrame(data []byte) (f Frame, err error) {
	defer func() {
		// Belt and braces: FuzzDecodeFrame runs decodeFrame without this
		// recover to find real panics, but a hostile frame must never take
		// the process down.
		if r := recover(); r != nil {
			f = Frame{}
			err = fmt.Errorf("upstream: decode frame: %w: panic: %v", ErrInvalidFrame, r)
		}
	}()
	return decodeFrame(data)
}

func decodeFrame(data []byte) (Frame, error) {
	// Fast path: the canonical #commit header and a body in the shape
	// producers write (frame_commit.go); anything else, cbor-gen below.
	if len(data) > len(commitHeader) && string(data[:len(commitHeader)]) == commitHeader {
		if c, n, ok := decodeCommitFast(data[len(commitHeader):]); ok {
			if rest := len(data) - len(commitHeader) - n; rest != 0 {
				return Frame{}, fmt.Errorf("upstream: decode frame: %w: %d trailing bytes", ErrInvalidFrame, rest)
			}
			return Frame{Op: FrameOpMessage, Type: TypeCommit, Commit: c}, nil
		}
	}
	br := bytes.NewReader(data)
	cr := cbg.NewCborReader(br)
	var f Frame
	op, typ, err := readFrameHeader(cr)
	if err != nil {
		return Frame{}, fmt.Errorf("upstream: decode frame: %w: header: %v", ErrInvalidFrame, err)
	}
	f.Op, f.Type = op, typ
	switch op {
	case FrameOpError:
		ef, err := readErrorFrame(cr)
		if err != nil {
			return Frame{}, fmt.Errorf("upstream: decode frame: %w: error body: %v", ErrInvalidFrame, err)
		}
		f.Error = ef
	case FrameOpMessage:
		switch typ {
		case TypeCommit:
			f.Commit = new(comatproto.SyncSubscribeRepos_Commit)
			err = f.Commit.UnmarshalCBOR(cr)
		case TypeSync:
			f.Sync = new(comatproto.SyncSubscribeRepos_Sync)
			err = f.Sync.UnmarshalCBOR(cr)
		case TypeIdentity:
			f.Identity = new(comatproto.SyncSubscribeRepos_Identity)
			err = f.Identity.UnmarshalCBOR(cr)
		case TypeAccount:
			f.Account = new(comatproto.SyncSubscribeRepos_Account)
			err = f.Account.UnmarshalCBOR(cr)
		case TypeInfo:
			f.Info = new(comatproto.SyncSubscribeRepos_Info)
			err = f.Info.UnmarshalCBOR(cr)
		default:
			return Frame{Op: op, Type: typ}, fmt.Errorf("upstream: decode frame: %w: %q", ErrUnknownFrameType, typ)
		}
		if err != nil {
			return Frame{}, fmt.Errorf("upstream: decode frame: %w: %s body: %v", ErrInvalidFrame, typ, err)
		}
	default:
		return Frame{}, fmt.Errorf("upstream: decode frame: %w: op %d", ErrInvalidFrame, op)
	}
	if br.Len() != 0 {
		return Frame{}, fmt.Errorf("upstream: decode frame: %w: %d trailing bytes", ErrInvalidFrame, br.Len())
	}
	return f, nil
}

// readFrameHeader reads the {op, t} map. op is required; t is required for
// op=1. Duplicate keys are refused; unknown keys are skipped.
func readFrameHeader(cr *cbg.CborReader) (op int64, typ string, err error) {
	maj, n, err := cr.ReadHeader()
	if err != nil {
		return 0, "", err
	}
	if maj != cbg.MajMap {
		return 0, "", fmt.Errorf("header is CBOR major type %d, not a map", maj)
	}
	if n > 16 {
		return 0, "", fmt.Errorf("header map has %d keys", n)
	}
	var seenOp, seenT bool
	for i := uint64(0); i < n; i++ {
		key, err := cbg.ReadStringWithMax(cr, 256)
		if err != nil {
			return 0, "", fmt.Errorf("key: %w", err)
		}
		switch key {
		case "op":
			if seenOp {
				return 0, "", errors.New(`duplicate key "op"`)
			}
			seenOp = true
			if op, err = readInt64(cr); err != nil {
				return 0, "", fmt.Errorf("op: %w", err)
			}
		case "t":
			if seenT {
				return 0, "", errors.New(`duplicate key "t"`)
			}
			seenT = true
			if typ, err = cbg.ReadStringWithMax(cr, 256); err != nil {
				return 0, "", fmt.Errorf("t: %w", err)
			}
		default:
			var d cbg.Deferred
			if err := d.UnmarshalCBOR(cr); err != nil {
				return 0, "", fmt.Errorf("key %q: %w", key, err)
			}
		}
	}
	if !seenOp {
		return 0, "", errors.New(`missing "op"`)
	}
	if op == FrameOpMessage && !seenT {
		return 0, "", errors.New(`message frame without "t"`)
	}
	return op, typ, nil
}

func readInt64(cr *cbg.CborReader) (int64, error) {
	maj, v, err := cr.ReadHeader()
	if err != nil {
		return 0, err
	}
	switch maj {
	case cbg.MajUnsignedInt:
		if v > math.MaxInt64 {
			return 0, errors.New("integer overflow")
		}
		return int64(v), nil
	case cbg.MajNegativeInt:
		if v > math.MaxInt64 {
			return 0, errors.New("integer overflow")
		}
		return -1 - int64(v), nil
	}
	return 0, fmt.Errorf("CBOR major type %d, not an integer", maj)
}

// readErrorFrame reads {error, message}; message may be absent.
func readErrorFrame(cr *cbg.CborReader) (*ErrorFrame, error) {
	maj, n, err := cr.ReadHeader()
	if err != nil {
		return nil, err
	}
	if maj != cbg.MajMap {
		return nil, fmt.Errorf("CBOR major type %d, not a map", maj)
	}
	if n > 16 {
		return nil, fmt.Errorf("map has %d keys", n)
	}
	ef := &ErrorFrame{}
	var seenErr, seenMsg bool
	for i := uint64(0); i < n; i++ {
		key, err := cbg.ReadStringWithMax(cr, 256)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		switch key {
		case "error":
			if seenErr {
				return nil, errors.New(`duplicate key "error"`)
			}
			seenErr = true
			if ef.Error, err = readOptString(cr); err != nil {
				return nil, fmt.Errorf("error: %w", err)
			}
		case "message":
			if seenMsg {
				return nil, errors.New(`duplicate key "message"`)
			}
			seenMsg = true
			if ef.Message, err = readOptString(cr); err != nil {
				return nil, fmt.Errorf("message: %w", err)
			}
		default:
			var d cbg.Deferred
			if err := d.UnmarshalCBOR(cr); err != nil {
				return nil, fmt.Errorf("key %q: %w", key, err)
			}
		}
	}
	if !seenErr {
		return nil, errors.New(`missing "error"`)
	}
	return ef, nil
}

// readOptString reads a text string or CBOR null ("").
func readOptString(cr *cbg.CborReader) (string, error) {
	b, err := cr.ReadByte()
	if err != nil {
		return "", err
	}
	if b == cbg.CborNull[0] {
		return "", nil
	}
	if err := cr.UnreadByte(); err != nil {
		return "", err
	}
	return cbg.ReadStringWithMax(cr, 64<<10)
}

// EncodeFrame is the inverse of DecodeFrame: it writes the header for f.Op /
// f.Type and the one body that is set. For op=-1 the header has no t.
func EncodeFrame(f *Frame) ([]byte, error) {
	var buf bytes.Buffer
	cw := cbg.NewCborWriter(&buf)
	var body interface{ MarshalCBOR(io.Writer) error }
	switch f.Op {
	case FrameOpError:
		if f.Error == nil {
			return nil, fmt.Errorf("upstream: encode frame: %w: op -1 without Error", ErrInvalidFrame)
		}
	case FrameOpMessage:
		switch {
		case f.Type == TypeCommit && f.Commit != nil:
			body = f.Commit
		case f.Type == TypeSync && f.Sync != nil:
			body = f.Sync
		case f.Type == TypeIdentity && f.Identity != nil:
			body = f.Identity
		case f.Type == TypeAccount && f.Account != nil:
			body = f.Account
		case f.Type == TypeInfo && f.Info != nil:
			body = f.Info
		default:
			return nil, fmt.Errorf("upstream: encode frame: %w: type %q without its body", ErrInvalidFrame, f.Type)
		}
	default:
		return nil, fmt.Errorf("upstream: encode frame: %w: op %d", ErrInvalidFrame, f.Op)
	}
	// Header: DAG-CBOR map, keys in length-then-bytewise order: "t", "op".
	nkeys := uint64(1)
	if f.Op == FrameOpMessage {
		nkeys = 2
	}
	if err := cw.WriteMajorTypeHeader(cbg.MajMap, nkeys); err != nil {
		return nil, err
	}
	if f.Op == FrameOpMessage {
		if err := writeText(cw, "t"); err != nil {
			return nil, err
		}
		if err := writeText(cw, f.Type); err != nil {
			return nil, err
		}
	}
	if err := writeText(cw, "op"); err != nil {
		return nil, err
	}
	if f.Op >= 0 {
		err := cw.WriteMajorTypeHeader(cbg.MajUnsignedInt, uint64(f.Op))
		if err != nil {
			return nil, err
		}
	} else if err := cw.WriteMajorTypeHeader(cbg.MajNegativeInt, uint64(-f.Op-1)); err != nil {
		return nil, err
	}
	if f.Op == FrameOpError {
		// {"error": ..., "message": ...} in DAG-CBOR key order.
		if err := cw.WriteMajorTypeHeader(cbg.MajMap, 2); err != nil {
			return nil, err
		}
		for _, kv := range [][2]string{{"error", f.Error.Error}, {"message", f.Error.Message}} {
			if err := writeText(cw, kv[0]); err != nil {
				return nil, err
			}
			if err := writeText(cw, kv[1]); err != nil {
				return nil, err
			}
		}
		return buf.Bytes(), nil
	}
	if err := body.MarshalCBOR(cw); err != nil {
		return nil, fmt.Errorf("upstream: encode frame: %s body: %w", f.Type, err)
	}
	return buf.Bytes(), nil
}

func writeText(cw *cbg.CborWriter, s string) error {
	if err := cw.WriteMajorTypeHeader(cbg.MajTextString, uint64(len(s))); err != nil {
		return err
	}
	_, err := cw.WriteString(s)
	return err
}
