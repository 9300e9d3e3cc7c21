package subscribe

// This file owns the reference record renderer: indigo's generic path
// (atdata.UnmarshalCBOR, then encoding/json with HTML escaping off). It is
// the definition of correct output for the transcoder (cborjson.go) and its
// fallback for the rare shapes the transcoder leaves alone.

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/atdata"
)

// AppendRecordJSONReference appends the atproto JSON form of the DAG-CBOR
// record rec to dst using indigo's generic path. It is slow (tens of µs and
// ~100 allocations per record); use AppendRecordJSON, which gives the same
// bytes.
func AppendRecordJSONReference(dst, rec []byte) ([]byte, error) {
	m, err := atdata.UnmarshalCBOR(rec)
	if err != nil {
		return dst, fmt.Errorf("subscribe: render record: %w: %v", ErrBadRecord, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return dst, fmt.Errorf("subscribe: render record: %w: %v", ErrBadRecord, err)
	}
	out := buf.Bytes()
	if n := len(out); n > 0 && out[n-1] == '\n' {
		out = out[:n-1]
	}
	return append(dst, out...), nil
}

// AppendRecordJSON appends the atproto JSON form of the DAG-CBOR record rec
// to dst: byte-identical to AppendRecordJSONReference, and an error exactly
// when it errors (errors.Is ErrBadRecord). On error dst is returned
// unchanged.
func AppendRecordJSON(dst, rec []byte) ([]byte, error) {
	r := rendererPool.Get().(*Renderer)
	out, err := r.tc.appendRecord(dst, rec)
	rendererPool.Put(r)
	return out, err
}

// appendRecord runs the transcoder and falls back to the reference path for
// the shapes the transcoder defers.
func (t *transcoder) appendRecord(dst, rec []byte) ([]byte, error) {
	out, err := t.transcode(dst, rec)
	switch err {
	case nil:
		return out, nil
	case errFallback:
		if err := checkDepth(rec, MaxRecordDepth); err != nil {
			return dst, fmt.Errorf("subscribe: render record: %w: %w", ErrBadRecord, err)
		}
		return AppendRecordJSONReference(dst, rec)
	case ErrTooDeep:
		return dst, fmt.Errorf("subscribe: render record: %w: %w", ErrBadRecord, err)
	}
	return dst, fmt.Errorf("subscribe: render record: %w: %v", ErrBadRecord, err)
}
