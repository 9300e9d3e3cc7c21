package diskspace

import (
	"fmt"
	"syscall"
)

// DefaultFloorBytes and DefaultFloorPercent make the default floor: the
// smaller of the two, so a small volume keeps 2 % and a large one 1 GiB.
const (
	DefaultFloorBytes   = 1 << 30
	DefaultFloorPercent = 2
)

// Space is one reading of a filesystem's size.
type Space struct {
	// Free is what an unprivileged writer may still use (f_bavail).
	Free uint64
	// Total is the filesystem's size (f_blocks).
	Total uint64
}

// Stat reads the filesystem holding path.
func Stat(path string) (Space, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return Space{}, fmt.Errorf("diskspace: statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return Space{Free: st.Bavail * bs, Total: st.Blocks * bs}, nil
}

// Floor is the free-space floor of a volume of the given total size, from
// the operator's setting (--min-free): a positive setting is the floor
// itself, zero asks for the default (the smaller of DefaultFloorBytes and
// DefaultFloorPercent of total), and a negative one turns the floor off (0:
// no reading is below it).
func Floor(setting int64, total uint64) uint64 {
	switch {
	case setting > 0:
		return uint64(setting)
	case setting < 0:
		return 0
	}
	return min(DefaultFloorBytes, total/100*DefaultFloorPercent)
}

// Below reports whether s has less free space than floor.
func (s Space) Below(floor uint64) bool { return s.Free < floor }
