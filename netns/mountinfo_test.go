package netns

import "strings"

// hasSharedMount reports whether mountinfo lists mountPoint with a shared:N tag.
func hasSharedMount(mountinfo, mountPoint string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[4] != mountPoint {
			continue
		}
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				return true
			}
		}
	}
	return false
}
