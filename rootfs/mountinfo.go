package rootfs

import (
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// mountsUnder lists mount points at or below any of dirs, deepest first,
// in this mount namespace, from one read of mountinfo. Mount points come
// unescaped from mountinfo.
func mountsUnder(dirs ...string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		for _, d := range dirs {
			// PrefixFilter's rule: dir itself and paths below dir+"/".
			if m.Mountpoint == d || strings.HasPrefix(m.Mountpoint, d+"/") {
				return false, false
			}
		}
		return true, false
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	// Later entries are mounted on top of earlier ones and deeper paths sit
	// inside shallower ones: unmount in reverse order, longest path first.
	slices.Reverse(out)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// overlayDirsInUse returns every directory that a mounted overlay uses as a
// lower, upper, work or data directory. A lower directory that is an
// idmapped mount of a layer (MountOverlayIDMapped) counts as that layer.
func overlayDirsInUse() (map[string]string, error) {
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	byPoint := map[string]*mountinfo.Info{}
	for _, m := range mounts {
		byPoint[m.Mountpoint] = m
	}
	used := map[string]string{}
	for _, m := range mounts {
		if m.FSType != "overlay" {
			continue
		}
		for _, opt := range strings.Split(m.VFSOptions, ",") {
			key, val, ok := strings.Cut(opt, "=")
			if !ok {
				continue
			}
			switch key {
			case "lowerdir", "lowerdir+", "upperdir", "workdir", "datadir+":
				for _, d := range strings.Split(val, ":") {
					if d == "" {
						continue
					}
					d = unescapeOption(d)
					used[d] = m.Mountpoint
					if src := bindSource(mounts, byPoint[d]); src != "" {
						used[src] = m.Mountpoint
					}
				}
			}
		}
	}
	return used, nil
}

// bindSource is the path, in this mount namespace, of the directory that
// bind mount b shows: b's root below a mount of the whole file system
// (root "/") of the same device. "" if b is nil or not found.
func bindSource(mounts []*mountinfo.Info, b *mountinfo.Info) string {
	if b == nil || b.Root == "/" {
		return ""
	}
	for _, m := range mounts {
		if m.Major == b.Major && m.Minor == b.Minor && m.Root == "/" {
			return filepath.Join(m.Mountpoint, b.Root)
		}
	}
	return ""
}

// unescapeOption undoes the kernel's octal escapes (\040 for space etc.)
// in a super option value: the mountinfo library unescapes paths (mount
// point, root, source) but hands the super options over raw.
func unescapeOption(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
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
