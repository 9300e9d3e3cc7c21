package human

import (
	"math"
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {12358, "12,358"}, {1234567, "1,234,567"}, {-1234, "-1,234"}, {math.MaxInt64, "9,223,372,036,854,775,807"}} {
		if got := Count(c.n); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Count(uint64(math.MaxUint64)); got != "18,446,744,073,709,551,615" {
		t.Errorf("Count(MaxUint64) = %q", got)
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {999, "999 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {1536, "1.50 KiB"}, {10 << 20, "10.0 MiB"}, {110100480, "105 MiB"}, {3 << 40, "3.00 TiB"}, {-2048, "-2.00 KiB"}} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{850 * time.Millisecond, "850ms"}, {42 * time.Second, "42s"}, {185 * time.Second, "3m05s"}, {2*time.Hour + 7*time.Minute, "2h07m"}, {76 * time.Hour, "3d04h"}, {-5 * time.Second, "-5s"}} {
		if got := Duration(c.d); got != c.want {
			t.Errorf("Duration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
