package world

import (
	"errors"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/atdata"
)

// errFloat: the atproto data model has no floats, but atdata.MarshalCBOR
// would encode them, so records are checked first.
var errFloat = errors.New("float in record (atproto data model has no floats)")

// marshalRecord encodes a record as DAG-CBOR with atdata.MarshalCBOR after
// rejecting floats anywhere in it.
func marshalRecord(rec map[string]any) ([]byte, error) {
	if err := checkNoFloats(rec); err != nil {
		return nil, fmt.Errorf("world: encode record: %w", err)
	}
	b, err := atdata.MarshalCBOR(rec)
	if err != nil {
		return nil, fmt.Errorf("world: encode record: %w", err)
	}
	return b, nil
}

func checkNoFloats(v any) error {
	switch x := v.(type) {
	case float32, float64, *float32, *float64:
		return errFloat
	case map[string]any:
		for _, e := range x {
			if err := checkNoFloats(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkNoFloats(e); err != nil {
				return err
			}
		}
	case []float64, []float32:
		return errFloat
	}
	return nil
}
