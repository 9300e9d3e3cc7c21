package subscribe

import (
	"testing"

	"github.com/backstream/backstream/oracle/world"
)

// TestTranscodeWorldRecordMix runs the differential check (transcoder vs
// indigo's generic path, byte for byte) over the simulated network's whole
// record mix, and requires the transcoder to handle every record itself.
func TestTranscodeWorldRecordMix(t *testing.T) {
	accounts := 300
	if testing.Short() {
		accounts = 60
	}
	w, err := world.Build(world.Config{Seed: 11, Accounts: accounts, RecordsMean: 20, Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, acc := range w.Accounts() {
		for path := range w.Records(acc.DID) {
			rec, ok := w.RecordBytes(acc.DID, path)
			if !ok {
				t.Fatalf("%s %s: no bytes", acc.DID, path)
			}
			if native := equalToReference(t, rec); !native {
				t.Fatalf("%s %s: the transcoder handed a world record to the reference path", acc.DID, path)
			}
			n++
		}
	}
	if n < 500 {
		t.Fatalf("only %d records", n)
	}
	t.Logf("%d world records byte-identical", n)
}
