package diskspace

import "testing"

func TestFloor(t *testing.T) {
	for _, c := range []struct {
		setting int64
		total   uint64
		want    uint64
	}{
		{0, 10 << 30, 10 << 30 / 100 * 2}, // 2 % of a small volume
		{0, 1 << 40, DefaultFloorBytes},   // 1 GiB of a large one
		{0, 0, 0},                         // unknown size: no floor
		{5 << 20, 1 << 40, 5 << 20},       // the operator's setting wins
		{-1, 10 << 30, 0},                 // negative: off
	} {
		if got := Floor(c.setting, c.total); got != c.want {
			t.Errorf("Floor(%d, %d) = %d, want %d", c.setting, c.total, got, c.want)
		}
	}
}

func TestStat(t *testing.T) {
	s, err := Stat(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if s.Total == 0 || s.Free > s.Total {
		t.Fatalf("implausible reading %+v", s)
	}
	if !s.Below(s.Free+1) || s.Below(s.Free) {
		t.Fatalf("Below is not strict at the free size: %+v", s)
	}
	if _, err := Stat("/nonexistent/backstream"); err == nil {
		t.Fatal("Stat of a missing path succeeded")
	}
}
