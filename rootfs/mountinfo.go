package rootfs

import (
	"bufio"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type mountEntry struct {
	mountPoint string
	fsType     string
	superOpts  string
}

// readMountinfo parses /proc/self/mountinfo (this mount namespace only).
func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Split(sc.Text(), " ")
		if len(fields) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(fields) {
			continue
		}
		e := mountEntry{mountPoint: unescapeMountinfo(fields[4]), fsType: fields[sep+1]}
		if sep+3 < len(fields) {
			e.superOpts = fields[sep+3]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space etc.).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.mountPoint == dir || strings.HasPrefix(m.mountPoint, dir+"/") {
			out = append(out, m.mountPoint)
		}
	}
	// Later entries are mounted on top of earlier ones and deeper paths sit
	// inside shallower ones: unmount in reverse order, longest path first.
	slices.Reverse(out)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// overlayDirsInUse returns every directory that a mounted overlay uses as a
// lower, upper, work or data directory.
func overlayDirsInUse() (map[string]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	used := map[string]string{}
	for _, m := range mounts {
		if m.fsType != "overlay" {
			continue
		}
		for _, opt := range strings.Split(m.superOpts, ",") {
			key, val, ok := strings.Cut(opt, "=")
			if !ok {
				continue
			}
			switch key {
			case "lowerdir", "lowerdir+", "upperdir", "workdir", "datadir+":
				for _, d := range strings.Split(val, ":") {
					if d != "" {
						used[unescapeMountinfo(d)] = m.mountPoint
					}
				}
			}
		}
	}
	return used, nil
}
