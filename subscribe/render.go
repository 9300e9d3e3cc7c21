package subscribe

// This file owns the Jetstream JSON wire shape of an archive.Event: the
// envelope around the record (the record itself is cborjson.go's).

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
)

// ErrBadCID means an event's binary CID does not parse as a CID.
var ErrBadCID = errors.New("event CID is not a valid CID")

// ErrUnknownKind means an event's Kind is none of the six renderable kinds.
var ErrUnknownKind = errors.New("event kind cannot be rendered")

// Renderer renders archive events as Jetstream JSON. The zero value is ready
// to use and renders exactly Jetstream's shapes. A Renderer keeps scratch
// space between calls, so a warm one does not allocate; it is not safe for
// concurrent use (keep one per goroutine).
type Renderer struct {
	// Cursor adds "cursor":<ev.Seq> right after "time_us": backstream's
	// resume point, which Jetstream does not send.
	Cursor bool
	// Reference renders records with indigo's generic path instead of the
	// transcoder. Same bytes, ~50× slower; for tests and benchmarks.
	Reference bool

	tc transcoder
}

// rendererPool holds warm scratch space for AppendJSON.
var rendererPool = sync.Pool{New: func() any { return new(Renderer) }}

// AppendJSON appends ev's Jetstream JSON to dst, with a pooled zero-option
// Renderer. See Renderer.AppendJSON.
func AppendJSON(dst []byte, ev *archive.Event) ([]byte, error) {
	r := rendererPool.Get().(*Renderer)
	out, err := r.AppendJSON(dst, ev)
	rendererPool.Put(r)
	return out, err
}

// AppendJSON appends ev's Jetstream JSON to dst and returns the extended
// slice. On error (ErrBadRecord, ErrBadCID, ErrUnknownKind, wrapped) it
// returns dst unchanged; it never panics on bad event contents.
func (r *Renderer) AppendJSON(dst []byte, ev *archive.Event) ([]byte, error) {
	start := len(dst)
	out, err := r.appendEvent(dst, ev)
	if err != nil {
		return dst[:start], err
	}
	return out, nil
}

// AppendRecordJSON appends the JSON form of one DAG-CBOR record, reusing the
// Renderer's scratch space. Same contract as the package-level
// AppendRecordJSON.
func (r *Renderer) AppendRecordJSON(dst, rec []byte) ([]byte, error) {
	if r.Reference {
		return AppendRecordJSONReference(dst, rec)
	}
	return r.tc.appendRecord(dst, rec)
}

func (r *Renderer) appendEvent(b []byte, ev *archive.Event) ([]byte, error) {
	var kind string
	switch {
	case ev.Kind.IsCommit():
		kind = "commit"
	case ev.Kind == archive.KindIdentity:
		kind = "identity"
	case ev.Kind == archive.KindAccount:
		kind = "account"
	case ev.Kind == archive.KindSync:
		kind = "sync"
	default:
		return b, fmt.Errorf("subscribe: render event seq %d: %w: %v", ev.Seq, ErrUnknownKind, ev.Kind)
	}
	b = append(b, `{"did":`...)
	b = appendJSONString(b, ev.DID, false)
	b = append(b, `,"time_us":`...)
	b = strconv.AppendInt(b, ev.TimeUS, 10)
	if r.Cursor {
		b = append(b, `,"cursor":`...)
		b = strconv.AppendUint(b, ev.Seq, 10)
	}
	b = append(b, `,"kind":"`...)
	b = append(b, kind...)
	b = append(b, `","`...)
	b = append(b, kind...)
	b = append(b, `":{`...)

	var err error
	switch ev.Kind {
	case archive.KindCreate, archive.KindUpdate, archive.KindDelete:
		b, err = r.appendCommit(b, ev)
		if err != nil {
			return b, err
		}
	case archive.KindIdentity:
		// Field order of comatproto.SyncSubscribeRepos_Identity.
		b = append(b, `"did":`...)
		b = appendJSONString(b, ev.DID, false)
		if ev.Handle != "" {
			b = append(b, `,"handle":`...)
			b = appendJSONString(b, ev.Handle, false)
		}
		b = appendSeqTime(b, ev)
	case archive.KindAccount:
		// Field order of comatproto.SyncSubscribeRepos_Account: status
		// (omitted when empty) comes before time.
		b = append(b, `"active":`...)
		b = strconv.AppendBool(b, ev.Active)
		b = append(b, `,"did":`...)
		b = appendJSONString(b, ev.DID, false)
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, ev.UpstreamSeq, 10)
		if ev.Status != "" {
			b = append(b, `,"status":`...)
			b = appendJSONString(b, ev.Status, false)
		}
		b = append(b, `,"time":"`...)
		b = appendTime(b, ev.TimeUS)
		b = append(b, '"')
	case archive.KindSync:
		// Field order of comatproto.SyncSubscribeRepos_Sync, without blocks.
		b = append(b, `"did":`...)
		b = appendJSONString(b, ev.DID, false)
		b = append(b, `,"rev":`...)
		b = appendJSONString(b, ev.Rev, false)
		b = appendSeqTime(b, ev)
	}
	return append(b, '}', '}'), nil
}

// appendCommit renders the commit object in the field order of Jetstream's
// models.Commit, whose fields are all omitempty.
func (r *Renderer) appendCommit(b []byte, ev *archive.Event) ([]byte, error) {
	op := "create"
	switch ev.Kind {
	case archive.KindUpdate:
		op = "update"
	case archive.KindDelete:
		op = "delete"
	}
	comma := false
	field := func(name string) {
		if comma {
			b = append(b, ',')
		}
		comma = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	if ev.Rev != "" {
		field("rev")
		b = appendJSONString(b, ev.Rev, false)
	}
	field("operation")
	b = append(b, '"')
	b = append(b, op...)
	b = append(b, '"')
	if ev.Collection != "" {
		field("collection")
		b = appendJSONString(b, ev.Collection, false)
	}
	if ev.RKey != "" {
		field("rkey")
		b = appendJSONString(b, ev.RKey, false)
	}
	if ev.Kind == archive.KindDelete {
		return b, nil
	}
	field("record")
	var err error
	if b, err = r.AppendRecordJSON(b, ev.Record); err != nil {
		return b, fmt.Errorf("subscribe: render event seq %d (%s %s/%s): %w", ev.Seq, ev.DID, ev.Collection, ev.RKey, err)
	}
	field("cid")
	b = append(b, '"')
	if b, err = appendCIDString(b, ev.CID); err != nil {
		return b, fmt.Errorf("subscribe: render event seq %d (%s %s/%s): %w: %v", ev.Seq, ev.DID, ev.Collection, ev.RKey, ErrBadCID, err)
	}
	return append(b, '"'), nil
}

func appendSeqTime(b []byte, ev *archive.Event) []byte {
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.UpstreamSeq, 10)
	b = append(b, `,"time":"`...)
	b = appendTime(b, ev.TimeUS)
	return append(b, '"')
}

// timeLayout is RFC 3339 in UTC with microseconds, the precision of TimeUS.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

func appendTime(b []byte, us int64) []byte {
	return time.UnixMicro(us).UTC().AppendFormat(b, timeLayout)
}
