package firehose

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// TestReceiptTokenMismatchIsFatal: a receipt in the consumer's mailbox
// whose token is not a seq (a bug of whoever submitted it) stops the
// consumer with an error naming the types; it never reads as seq 0 or
// moves LastDurable.
func TestReceiptTokenMismatchIsFatal(t *testing.T) {
	wr := newWriter(t, openStore(t), true)
	cur := int64(5)
	c, err := New(Config{Relay: "ws://x", Writer: wr, Mode: ModeCapture, Cursor: &cur})
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Submit(context.Background(), &archive.Unit{Token: uint64(9), Acks: c.acks}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the receipt's error", func() bool { return c.Err() != nil })
	if err := c.Err(); !strings.Contains(err.Error(), "token is uint64, want int64") || errors.Is(err, ErrUnitRefused) {
		t.Fatalf("Err = %v, want the token mismatch", err)
	}
	if d := c.LastDurable(); d != cur {
		t.Fatalf("LastDurable %d, want the starting cursor %d", d, cur)
	}
}
