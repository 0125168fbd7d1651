package volume

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podlab/podlab/internal/testutil"
)

// Root tests: tmpfs mounts (secret, projected, emptyDir medium Memory),
// Teardown, fsGroup ownership.

// rootDir prepares a root test: root required (skip, or fail when CI=true),
// the leak check registered as the first cleanup (so it runs last), then a
// temp dir, then a cleanup that fails the test if a mount is left under
// that dir and unmounts it, so that one failure leaves the host clean for
// the tests after it.
func rootDir(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	base := t.TempDir()
	t.Cleanup(func() {
		left, err := mountPointsUnder(base)
		if err != nil {
			t.Error(err)
			return
		}
		if len(left) > 0 {
			t.Errorf("mounts left under %s: %v", base, left)
			_ = unmountUnder(base)
		}
	})
	return filepath.Join(base, "volumes")
}

// mountinfoEntry returns the fstype and super options of the mount at mp.
func mountinfoEntry(t *testing.T, mp string) (fstype, superOpts string, ok bool) {
	t.Helper()
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != mp, false })
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) == 0 {
		return "", "", false
	}
	top := mounts[len(mounts)-1] // the last entry is the top one
	return top.FSType, top.VFSOptions, true
}

func TestRootTmpfsVolumes(t *testing.T) {
	dir := rootDir(t)
	sec := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"user": "admin"}}
	cm := &corev1.ConfigMap{Data: map[string]string{"config": "c"}}
	pod := testPod([]corev1.Volume{
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: ptr[int32](0o400)}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi"))}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Items: []corev1.KeyToPath{{Key: "user", Path: "creds/user"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
		}}}},
		{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "missing", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nope", Optional: ptr(true)}}},
	})
	pv, err := Setup(dir, Source{Pod: pod, Secrets: map[string]*corev1.Secret{"s": sec}, ConfigMaps: map[string]*corev1.ConfigMap{"c": cm}})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { _ = Teardown(dir) })

	// Secret, projected and memory emptyDir volumes are tmpfs mounts, mode
	// 1777 like a kubelet secret volume (drwxrwxrwt); a disk emptyDir is not.
	for name, wantSize := range map[string]string{"creds": "", "cache": "size=1024k", "proj": "", "missing": ""} {
		path := pv.Paths[name]
		fstype, opts, ok := mountinfoEntry(t, path)
		if !ok || fstype != "tmpfs" {
			t.Errorf("volume %s at %s: mounted=%v fstype=%q, want tmpfs", name, path, ok, fstype)
			continue
		}
		if wantSize != "" && !strings.Contains(opts, wantSize) {
			t.Errorf("volume %s: tmpfs options %q, want %s", name, opts, wantSize)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&fs.ModeSticky == 0 {
			t.Errorf("volume %s: mode %v, %v; want drwxrwxrwt", name, fi.Mode(), err)
		}
		if !pv.vols[name].tmpfs {
			t.Errorf("volume %s not recorded as tmpfs", name)
		}
	}
	if _, _, ok := mountinfoEntry(t, pv.Paths["disk"]); ok {
		t.Errorf("disk emptyDir is a mount point")
	}
	files, modes := readVolume(t, pv.Paths["creds"])
	if files["password"] != "hunter2" || files["user"] != "admin" || modes["password"] != 0o400 {
		t.Errorf("secret volume: files %v modes %v", files, modes)
	}
	files, _ = readVolume(t, pv.Paths["proj"])
	if want := map[string]string{"creds/user": "admin", "config": "c", "labels": "app=\"web\"\ntier=\"front \\\"end\\\"\""}; !mapsEqual(files, want) {
		t.Errorf("projected volume: %v, want %v", files, want)
	}

	// Teardown unmounts everything and removes the dir; twice is fine.
	if err := Teardown(dir); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if left, _ := mountPointsUnder(filepath.Dir(dir)); len(left) > 0 {
		t.Errorf("mounts left after Teardown: %v", left)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there after Teardown (%v)", dir, err)
	}
	if err := Teardown(dir); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// Teardown from a fresh process that only knows the directory, as after a
// crash: the test binary re-execs itself to run TestHelperTeardown.
func TestRootTeardownFreshProcess(t *testing.T) {
	dir := rootDir(t)
	sec := &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	pod := testPod([]corev1.Volume{
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	})
	pv, err := Setup(dir, Source{Pod: pod, Secrets: map[string]*corev1.Secret{"s": sec}})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { _ = Teardown(dir) })

	// Make it harder than Setup does: a mount nested in a tmpfs, a second
	// tmpfs stacked on the first, and a bind mount of a host dir whose
	// content must survive (Teardown must not remove through a mount).
	mem := pv.Paths["mem"]
	nested := filepath.Join(mem, "nested")
	hostData := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostData, "keep"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	bind := filepath.Join(pv.Paths["creds"], "bind")
	mustMount(t, "", mem, "tmpfs", 0, "")
	mustMkdir(t, nested)
	mustMount(t, "", nested, "tmpfs", 0, "")
	mustMkdir(t, bind)
	mustMount(t, hostData, bind, "", unix.MS_BIND, "")
	if err := os.WriteFile(filepath.Join(nested, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// 4 mount points, 5 mounts (two stacked on mem).
	if before, _ := mountPointsUnder(dir); len(before) != 4 {
		t.Fatalf("expected 4 mount points under %s, got %v", dir, before)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTeardown$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PODLAB_VOLUME_TEARDOWN_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Teardown in a fresh process: %v\n%s", err, out)
	}
	if left, _ := mountPointsUnder(dir); len(left) > 0 {
		t.Errorf("mounts left after Teardown: %v", left)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there after Teardown (%v)", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(hostData, "keep")); err != nil || string(b) != "precious" {
		t.Errorf("bind-mounted host data damaged by Teardown: %q, %v", b, err)
	}
}

// TestHelperTeardown is run by TestRootTeardownFreshProcess in a child
// process; on its own it does nothing.
func TestHelperTeardown(t *testing.T) {
	dir := os.Getenv("PODLAB_VOLUME_TEARDOWN_DIR")
	if dir == "" {
		t.Skip("helper for TestRootTeardownFreshProcess")
	}
	if err := Teardown(dir); err != nil {
		t.Fatal(err)
	}
}

func mustMount(t *testing.T, src, target, fstype string, flags uintptr, data string) {
	t.Helper()
	if src == "" {
		src = fstype
	}
	if err := unix.Mount(src, target, fstype, flags, data); err != nil {
		t.Fatalf("mount %s on %s: %v", src, target, err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A Setup that fails after mounting tmpfs volumes unmounts them.
func TestRootSetupUndoUnmounts(t *testing.T) {
	dir := rootDir(t)
	sec := &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	clash := filepath.Join(dir, "kubernetes.io~empty-dir", "clash")
	pod := testPod([]corev1.Volume{
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "squat", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: clash, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
		{Name: "clash", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	})
	if _, err := Setup(dir, Source{Pod: pod, Secrets: map[string]*corev1.Secret{"s": sec}}); err == nil {
		t.Fatal("Setup: no error")
	}
	if left, _ := mountPointsUnder(filepath.Dir(dir)); len(left) > 0 {
		t.Errorf("mounts left after a failed Setup: %v", left)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left after a failed Setup (%v)", dir, err)
	}
}

// fsGroup: group ownership and g+rw (g+r for read-only kinds), setgid dirs,
// like the kubelet's SetVolumeOwnership.
func TestRootFSGroup(t *testing.T) {
	dir := rootDir(t)
	const gid = 4321
	cm := &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}}
	pod := testPod([]corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		cmVol("cfg", corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{
			{Key: "a", Path: "a", Mode: ptr[int32](0o400)},
			{Key: "b", Path: "sub/b", Mode: ptr[int32](0o600)},
		}}),
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	}, corev1.VolumeMount{Name: "scratch", MountPath: "/s", SubPath: "made/here"})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr[int64](gid)}
	pv, err := Setup(dir, Source{Pod: pod, ConfigMaps: map[string]*corev1.ConfigMap{"c": cm}})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := Teardown(dir); err != nil {
			t.Error(err)
		}
	})
	ts, err := os.Readlink(filepath.Join(pv.Paths["cfg"], "..data"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := pv.Paths["cfg"]
	for path, want := range map[string]fs.FileMode{
		pv.Paths["scratch"]:                fs.ModeDir | fs.ModeSetgid | 0o777,
		pv.Paths["mem"]:                    fs.ModeDir | fs.ModeSetgid | fs.ModeSticky | 0o777,
		cfg:                                fs.ModeDir | fs.ModeSetgid | 0o777,
		filepath.Join(cfg, ts):             fs.ModeDir | fs.ModeSetgid | 0o755,
		filepath.Join(cfg, ts, "sub"):      fs.ModeDir | fs.ModeSetgid | 0o755,
		filepath.Join(cfg, ts, "a"):        0o440, // 0400 | g+r (read-only kind)
		filepath.Join(cfg, ts, "sub", "b"): 0o640,
		filepath.Join(cfg, "..data"):       fs.ModeSymlink | 0o777,
		filepath.Join(cfg, "a"):            fs.ModeSymlink | 0o777,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
		if g := fi.Sys().(*syscall.Stat_t).Gid; g != gid {
			t.Errorf("%s: group %d, want %d", path, g, gid)
		}
	}
	// A subPath created later in a setgid volume inherits the group.
	mounts, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(mounts[0].Source)
	if err != nil {
		t.Fatal(err)
	}
	if g := fi.Sys().(*syscall.Stat_t).Gid; g != gid || fi.Mode().Perm() != 0o777 {
		t.Errorf("subPath dir: group %d mode %v, want group %d and 0777", g, fi.Mode(), gid)
	}
}
