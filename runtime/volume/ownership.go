package volume

import (
	"io/fs"
	"os"
	"path/filepath"
)

// SetVolumeOwnership masks (pkg/volume/volume_linux.go).
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

// setVolumeOwnership is the kubelet's SetVolumeOwnership for a pod with
// securityContext.fsGroup: every entry of the volume gets group fsGroup;
// files get g+rw (g+r for the read-only kinds: configMap, secret,
// downwardAPI, projected, whose GetAttributes().ReadOnly is true); dirs also
// get g+x and setgid, so that what containers create inherits the group.
// Symlinks are lchowned but not chmodded (chmod would follow them).
func setVolumeOwnership(dir string, fsGroup int64, readOnly bool) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(fsGroup)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mask := rwMask
		if readOnly {
			mask = roMask
		}
		if info.IsDir() {
			mask |= os.ModeSetgid | execMask
		}
		// os.Chmod maps ModeSetgid/ModeSticky to S_ISGID/S_ISVTX.
		return os.Chmod(path, info.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSticky|os.ModeSetuid)|mask)
	})
}
