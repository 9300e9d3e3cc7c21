package human

import (
	"fmt"
	"strconv"
	"time"
)

// Count renders n with a comma between each group of three digits:
// 12358 → "12,358".
func Count[T ~int | ~int64 | ~uint64 | ~int32 | ~uint32 | ~uint](n T) string {
	neg := n < 0
	var s string
	if neg {
		s = strconv.FormatUint(uint64(-int64(n)), 10)
	} else {
		s = strconv.FormatUint(uint64(n), 10)
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

var byteUnits = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// Bytes renders a size in binary units with three significant digits where
// they fit: 999 → "999 B", 1536 → "1.50 KiB", 110100480 → "105 MiB".
func Bytes[T ~int | ~int64 | ~uint64](n T) string {
	if n < 0 {
		return "-" + Bytes(-int64(n))
	}
	if n < 1024 {
		return strconv.FormatUint(uint64(n), 10) + " B"
	}
	v := float64(n)
	unit := -1
	for v >= 1024 && unit < len(byteUnits)-1 {
		v /= 1024
		unit++
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, byteUnits[unit])
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, byteUnits[unit])
	default:
		return fmt.Sprintf("%.2f %s", v, byteUnits[unit])
	}
}

// Duration renders d rounded to what a person reads: "850ms", "42s",
// "3m05s", "2h07m", "3d04h".
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", d/time.Hour, (d%time.Hour)/time.Minute)
	default:
		d = d.Round(time.Hour)
		return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
	}
}
