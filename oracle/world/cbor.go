package world

import (
	"fmt"

	"github.com/bluesky-social/indigo/atproto/atdata"
)

// marshalRecord encodes a record as DAG-CBOR with atdata.MarshalCBOR.
func marshalRecord(rec map[string]any) ([]byte, error) {
	b, err := atdata.MarshalCBOR(rec)
	if err != nil {
		return nil, fmt.Errorf("world: encode record: %w", err)
	}
	return b, nil
}
