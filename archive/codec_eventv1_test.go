package archive

// The version 1 event encoding, frozen: rows written before version 2 are
// made with it in tests, to prove they still read (and the fuzzer's
// canonical-form check has an encoder for them).

import "encoding/binary"

// appendEventV1 appends the version 1 encoding of ev to dst.
func appendEventV1(dst []byte, ev *Event) ([]byte, error) {
	if err := ValidateEvent(ev); err != nil {
		return dst, err
	}
	m := eventMask(ev)
	if m&evCID != 0 && m&evRecord != 0 && derivable(ev) {
		m = m&^evCID | evCIDDerived
	}
	dst = append(dst, codecV1, byte(ev.Kind), byte(ev.Source))
	dst = binary.AppendUvarint(dst, m)
	dst = binary.AppendUvarint(dst, uint64(ev.TimeUS))
	dst = appendString(dst, ev.DID)
	if m&evCollection != 0 {
		dst = appendString(dst, ev.Collection)
	}
	if m&evRKey != 0 {
		dst = appendString(dst, ev.RKey)
	}
	if m&evRev != 0 {
		dst = appendString(dst, ev.Rev)
	}
	if m&evCID != 0 {
		dst = appendBytes(dst, ev.CID)
	}
	if m&evRecord != 0 {
		dst = appendBytes(dst, ev.Record)
	}
	if m&evHandle != 0 {
		dst = appendString(dst, ev.Handle)
	}
	if m&evStatus != 0 {
		dst = appendString(dst, ev.Status)
	}
	if m&evUpstreamSeq != 0 {
		dst = binary.AppendUvarint(dst, uint64(ev.UpstreamSeq))
	}
	if m&evSince != 0 {
		dst = appendString(dst, ev.Since)
	}
	return dst, nil
}
