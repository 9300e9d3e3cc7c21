package storefault

import (
	"io"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// TestHold: a selected call blocks, counted, until Release; other calls
// and the calls after Release go through.
func TestHold(t *testing.T) {
	mem := vfs.NewMem()
	for _, name := range []string{"000001.sst", "MANIFEST-000001"} {
		f, err := mem.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	h := Hold(mem, TableReads)
	defer h.Release()
	read := func(name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			f, err := h.Open(name)
			if err == nil {
				_, err = f.ReadAt(make([]byte, 4), 0)
				f.Close()
			}
			if err == io.EOF {
				err = nil
			}
			done <- err
		}()
		return done
	}
	if err := <-read("MANIFEST-000001"); err != nil || h.Holds() != 0 {
		t.Fatalf("a read of a file no match selects: %v, holds %d; want through, 0", err, h.Holds())
	}
	table := read("000001.sst")
	for h.Holds() != 1 {
		time.Sleep(time.Millisecond) // waits for the condition: the read reached the hold
	}
	select {
	case err := <-table:
		t.Fatalf("a held table read returned before Release: %v", err)
	default:
	}
	h.Release()
	if err := <-table; err != nil {
		t.Fatalf("the held read after Release: %v", err)
	}
	h.Release() // again: no panic
	if err := <-read("000001.sst"); err != nil || h.Holds() != 2 {
		t.Fatalf("a table read after Release: %v, holds %d; want through, 2", err, h.Holds())
	}
}
