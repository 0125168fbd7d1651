package volume

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Unit tests: none of them needs root. Volumes that need a mount (secret,
// projected, emptyDir medium Memory) are only set up in root_test.go; here
// they only fail validation, which happens before any side effect.

func ptr[T any](v T) *T { return &v }

func testPod(vols []corev1.Volume, mounts ...corev1.VolumeMount) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "0b9c1a6e-8d0b-4c55-9a57-1f0e3e1b2c3d",
			Labels:      map[string]string{"app": "web", "tier": `front "end"`},
			Annotations: map[string]string{"note": "line1\nline2", "a.example.com/x": "ü"},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
			}}},
			Containers: []corev1.Container{{
				Name:         "app",
				VolumeMounts: mounts,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				},
			}, {Name: "nolimits"}},
			Volumes: vols,
		},
	}
}

func cmVol(name string, s corev1.ConfigMapVolumeSource) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &s}}
}

func setup(t *testing.T, src Source) (*PodVolumes, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volumes")
	pv, err := Setup(dir, src)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := Teardown(dir); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
	return pv, dir
}

// setupErr runs Setup expecting an error containing want, and checks that
// the failed Setup left nothing behind.
func setupErr(t *testing.T, src Source, want string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volumes")
	_, err := Setup(dir, src)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Setup error = %v, want it to contain %q", err, want)
	}
	if _, serr := os.Lstat(dir); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("failed Setup left %s behind (%v)", dir, serr)
	}
}

// readVolume returns every user-visible file of a volume (following the
// AtomicWriter symlinks) as path → content, and path → mode.
func readVolume(t *testing.T, dir string) (map[string]string, map[string]fs.FileMode) {
	t.Helper()
	files, modes := map[string]string{}, map[string]fs.FileMode{}
	var walk func(rel string)
	walk = func(rel string) {
		entries, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			p := filepath.Join(rel, e.Name())
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() {
				walk(p)
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				t.Fatal(err)
			}
			files[p], modes[p] = string(b), fi.Mode().Perm()
		}
	}
	walk("")
	return files, modes
}

func TestConfigMapVolume(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app-config"},
		Data:       map[string]string{"LEVEL": "debug", "app.yaml": "a: 1\n"},
		BinaryData: map[string][]byte{"logo.bin": {0, 1, 2, 0xff}},
	}
	src := func(v corev1.Volume) Source {
		return Source{Pod: testPod([]corev1.Volume{v}), ConfigMaps: map[string]*corev1.ConfigMap{"app-config": cm}}
	}
	ref := corev1.LocalObjectReference{Name: "app-config"}
	tests := []struct {
		name      string
		vol       corev1.VolumeSource
		wantFiles map[string]string
		wantModes map[string]fs.FileMode
		wantErr   string
	}{
		{
			name:      "all keys with default mode 0644 and binaryData",
			vol:       corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref}},
			wantFiles: map[string]string{"LEVEL": "debug", "app.yaml": "a: 1\n", "logo.bin": "\x00\x01\x02\xff"},
			wantModes: map[string]fs.FileMode{"LEVEL": 0o644, "app.yaml": 0o644, "logo.bin": 0o644},
		},
		{
			name:      "defaultMode",
			vol:       corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, DefaultMode: ptr[int32](0o600)}},
			wantFiles: map[string]string{"LEVEL": "debug", "app.yaml": "a: 1\n", "logo.bin": "\x00\x01\x02\xff"},
			wantModes: map[string]fs.FileMode{"LEVEL": 0o600, "app.yaml": 0o600, "logo.bin": 0o600},
		},
		{
			name: "items with paths and modes",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, DefaultMode: ptr[int32](0o640), Items: []corev1.KeyToPath{
				{Key: "LEVEL", Path: "conf/level", Mode: ptr[int32](0o400)},
				{Key: "app.yaml", Path: "conf/nested/app.yaml"},
				{Key: "logo.bin", Path: "logo"},
			}}},
			wantFiles: map[string]string{"conf/level": "debug", "conf/nested/app.yaml": "a: 1\n", "logo": "\x00\x01\x02\xff"},
			wantModes: map[string]fs.FileMode{"conf/level": 0o400, "conf/nested/app.yaml": 0o640, "logo": 0o640},
		},
		{
			name:      "optional missing configMap is an empty volume",
			vol:       corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Optional: ptr(true)}},
			wantFiles: map[string]string{},
			wantModes: map[string]fs.FileMode{},
		},
		{
			name: "optional: a missing item key is skipped",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Optional: ptr(true), Items: []corev1.KeyToPath{
				{Key: "MISSING", Path: "m"}, {Key: "LEVEL", Path: "l"},
			}}},
			wantFiles: map[string]string{"l": "debug"},
			wantModes: map[string]fs.FileMode{"l": 0o644},
		},
		{
			name:    "missing configMap",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}},
			wantErr: `spec.volumes[0].configMap.name: ConfigMap "nope" not found`,
		},
		{
			name:    "missing item key",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "LEVEL", Path: "l"}, {Key: "MISSING", Path: "m"}}}},
			wantErr: `spec.volumes[0].configMap.items[1].key: key "MISSING" not found in ConfigMap "app-config"`,
		},
		{
			name:    "absolute item path",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "LEVEL", Path: "/etc/level"}}}},
			wantErr: `spec.volumes[0].configMap.items[0].path: invalid value "/etc/level": must be a relative path`,
		},
		{
			name:    "item path with ..",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "LEVEL", Path: "a/../../level"}}}},
			wantErr: `spec.volumes[0].configMap.items[0].path: invalid value "a/../../level": must not contain '..'`,
		},
		{
			name:    "item path starting with ..",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "LEVEL", Path: "..data"}}}},
			wantErr: `spec.volumes[0].configMap.items[0].path: invalid value "..data": must not start with '..'`,
		},
		{
			name:    "item mode out of range",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{{Key: "LEVEL", Path: "l", Mode: ptr[int32](0o1000)}}}},
			wantErr: `spec.volumes[0].configMap.items[0].mode: invalid value 01000: must be a number between 0 and 0777`,
		},
		{
			name:    "defaultMode out of range",
			vol:     corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, DefaultMode: ptr[int32](-1)}},
			wantErr: `spec.volumes[0].configMap.defaultMode: invalid value`,
		},
		{
			name: "a file path that is another item's directory",
			vol: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref, Items: []corev1.KeyToPath{
				{Key: "LEVEL", Path: "conf"}, {Key: "app.yaml", Path: "conf/app.yaml"},
			}}},
			wantErr: `spec.volumes[0].configMap.items[1].path: invalid value "conf/app.yaml": conflicting duplicate paths (with spec.volumes[0].configMap.items[0].path)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := src(corev1.Volume{Name: "cfg", VolumeSource: tt.vol})
			if tt.wantErr != "" {
				setupErr(t, s, tt.wantErr)
				return
			}
			pv, _ := setup(t, s)
			files, modes := readVolume(t, pv.Paths["cfg"])
			if d := cmp.Diff(tt.wantFiles, files); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantModes, modes); d != "" {
				t.Errorf("modes (-want +got):\n%s", d)
			}
		})
	}
}

var tsDirRE = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

func TestAtomicWriterLayout(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"k1": "v1", "k2": "v2", "k3": "v3"}}
	pod := testPod([]corev1.Volume{cmVol("cfg", corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "c"},
		Items: []corev1.KeyToPath{
			{Key: "k1", Path: "top"},
			{Key: "k2", Path: "sub/a"},
			{Key: "k3", Path: "sub/deeper/b"},
		},
	})})
	pv, dir := setup(t, Source{Pod: pod, ConfigMaps: map[string]*corev1.ConfigMap{"c": cm}})

	vol := pv.Paths["cfg"]
	if want := filepath.Join(dir, "kubernetes.io~configmap", "cfg"); vol != want {
		t.Fatalf("Paths[cfg] = %s, want %s", vol, want)
	}
	// ..data → the timestamped dir, relative.
	ts, err := os.Readlink(filepath.Join(vol, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	if !tsDirRE.MatchString(ts) {
		t.Errorf("..data -> %q, want a timestamped dir like ..2024_01_01_00_00_00.123456789", ts)
	}
	// Top-level entries are symlinks into ..data; nested paths share one.
	entries, err := os.ReadDir(vol)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			if e.Name() != ts {
				t.Errorf("unexpected non-symlink %s in volume", e.Name())
			}
			continue
		}
		got[e.Name()], _ = os.Readlink(filepath.Join(vol, e.Name()))
	}
	want := map[string]string{"..data": ts, "top": "..data/top", "sub": "..data/sub"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("symlinks (-want +got):\n%s", d)
	}
	for path, mode := range map[string]fs.FileMode{
		vol:                                  0o777 | fs.ModeDir, // emptyDir-wrapped, like the kubelet
		filepath.Join(vol, ts):               0o755 | fs.ModeDir,
		filepath.Join(vol, ts, "sub"):        0o755 | fs.ModeDir,
		filepath.Join(vol, ts, "sub/deeper"): 0o755 | fs.ModeDir,
		filepath.Join(vol, ts, "top"):        0o644,
		dir:                                  0o750 | fs.ModeDir,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(vol, "sub/deeper/b")); err != nil || string(b) != "v3" {
		t.Errorf("sub/deeper/b = %q, %v", b, err)
	}
}

func TestDownwardAPIVolume(t *testing.T) {
	item := func(path, fieldPath string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}
	}
	res := func(path, ctr, r, divisor string) corev1.DownwardAPIVolumeFile {
		sel := &corev1.ResourceFieldSelector{ContainerName: ctr, Resource: r}
		if divisor != "" {
			sel.Divisor = resource.MustParse(divisor)
		}
		return corev1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: sel}
	}
	mem, err := memTotal()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		items   []corev1.DownwardAPIVolumeFile
		mode    *int32
		want    map[string]string
		modes   map[string]fs.FileMode
		wantErr string
	}{
		{
			name: "metadata",
			items: []corev1.DownwardAPIVolumeFile{
				item("name", "metadata.name"), item("ns", "metadata.namespace"), item("uid", "metadata.uid"),
				item("meta/labels", "metadata.labels"), item("meta/annotations", "metadata.annotations"),
				item("app", "metadata.labels['app']"), item("none", "metadata.labels['absent']"),
				item("note", "metadata.annotations['note']"),
			},
			want: map[string]string{
				"name": "web", "ns": "default", "uid": "0b9c1a6e-8d0b-4c55-9a57-1f0e3e1b2c3d",
				// fieldpath.FormatMap: sorted, strconv.Quote'd, no trailing newline.
				"meta/labels":      "app=\"web\"\ntier=\"front \\\"end\\\"\"",
				"meta/annotations": "a.example.com/x=\"ü\"\nnote=\"line1\\nline2\"",
				"app":              "web", "none": "", "note": "line1\nline2",
			},
		},
		{
			name: "resources with divisors",
			items: []corev1.DownwardAPIVolumeFile{
				res("cpu_limit", "app", "limits.cpu", ""),         // 500m / 1 rounded up
				res("cpu_limit_m", "app", "limits.cpu", "1m"),     // millicores
				res("cpu_request_m", "app", "requests.cpu", "1m"), // 250
				res("mem_limit", "app", "limits.memory", ""),      // bytes
				res("mem_limit_mi", "app", "limits.memory", "1Mi"),
				res("mem_request", "app", "requests.memory", ""), // unset request: 0
				res("init_mem", "init", "limits.memory", "1Mi"),  // init containers are found too
			},
			want: map[string]string{
				"cpu_limit": "1", "cpu_limit_m": "500", "cpu_request_m": "250",
				"mem_limit": strconv.Itoa(64 << 20), "mem_limit_mi": "64", "mem_request": "0", "init_mem": "32",
			},
		},
		{
			name: "unset limits are node allocatable",
			items: []corev1.DownwardAPIVolumeFile{
				res("cpu", "nolimits", "limits.cpu", ""),
				res("mem", "nolimits", "limits.memory", ""),
				res("mem_ki", "nolimits", "limits.memory", "1Ki"),
			},
			want: map[string]string{"cpu": strconv.Itoa(runtime.NumCPU()), "mem": strconv.FormatInt(mem, 10), "mem_ki": strconv.FormatInt(mem/1024, 10)},
		},
		{
			name:  "item mode and defaultMode",
			items: []corev1.DownwardAPIVolumeFile{item("name", "metadata.name"), {Path: "ns", Mode: ptr[int32](0o400), FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			mode:  ptr[int32](0o600),
			want:  map[string]string{"name": "web", "ns": "default"},
			modes: map[string]fs.FileMode{"name": 0o600, "ns": 0o400},
		},
		{
			name:    "unsupported fieldPath",
			items:   []corev1.DownwardAPIVolumeFile{item("ip", "status.podIP")},
			wantErr: `spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: unsupported fieldPath "status.podIP"`,
		},
		{
			name:    "resourceFieldRef without containerName",
			items:   []corev1.DownwardAPIVolumeFile{res("cpu", "", "limits.cpu", "")},
			wantErr: `spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: required`,
		},
		{
			name:    "resourceFieldRef to an unknown container",
			items:   []corev1.DownwardAPIVolumeFile{res("cpu", "ghost", "limits.cpu", "")},
			wantErr: `spec.volumes[0].downwardAPI.items[0].resourceFieldRef: containerName: container "ghost" not found`,
		},
		{
			name:    "unsupported resource",
			items:   []corev1.DownwardAPIVolumeFile{res("gpu", "app", "limits.nvidia.com/gpu", "")},
			wantErr: `unsupported container resource "limits.nvidia.com/gpu"`,
		},
		{
			name:    "item path with ..",
			items:   []corev1.DownwardAPIVolumeFile{item("../name", "metadata.name")},
			wantErr: `spec.volumes[0].downwardAPI.items[0].path: invalid value "../name": must not contain '..'`,
		},
		{
			name:    "item without a source",
			items:   []corev1.DownwardAPIVolumeFile{{Path: "x"}},
			wantErr: `spec.volumes[0].downwardAPI.items[0]: one of fieldRef and resourceFieldRef is required`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod([]corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{
				DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: tt.items, DefaultMode: tt.mode},
			}}})
			if tt.wantErr != "" {
				setupErr(t, Source{Pod: pod}, tt.wantErr)
				return
			}
			pv, _ := setup(t, Source{Pod: pod})
			files, modes := readVolume(t, pv.Paths["info"])
			if d := cmp.Diff(tt.want, files); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
			if tt.modes != nil {
				if d := cmp.Diff(tt.modes, modes); d != "" {
					t.Errorf("modes (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestSubPath(t *testing.T) {
	outside := t.TempDir()
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	tests := []struct {
		name    string
		prepare func(t *testing.T, vol string) // populate the volume before Mounts
		subPath string
		want    string // relative to the volume
		created bool   // the subPath dir did not exist and must be created
		wantErr string
	}{
		{name: "existing dir", prepare: mkdirs("a/b"), subPath: "a/b", want: "a/b"},
		{name: "existing file", prepare: writeFiles("conf.txt"), subPath: "conf.txt", want: "conf.txt"},
		{name: "symlink inside the volume", prepare: chain(mkdirs("real"), symlink("real", "link")), subPath: "link", want: "real"},
		{name: "missing dir is created", subPath: "new", want: "new", created: true},
		{name: "missing nested dirs are created", prepare: mkdirs("a"), subPath: "a/b/c", want: "a/b/c", created: true},
		{
			name: "relative symlink escaping", prepare: symlink("../../../..", "up"), subPath: "up/etc",
			wantErr: `spec.containers[0].volumeMounts[1].subPath: "up/etc" escapes volume "data" through a symlink`,
		},
		{
			name: "absolute symlink escaping", prepare: symlink(outside, "abs"), subPath: "abs",
			wantErr: `spec.containers[0].volumeMounts[1].subPath: "abs" escapes volume "data" through a symlink`,
		},
		{
			name: "dangling symlink escaping", prepare: symlink("/nonexistent-volume-test", "dangle"), subPath: "dangle/x",
			wantErr: `spec.containers[0].volumeMounts[1].subPath: "dangle/x" escapes volume "data" through a symlink`,
		},
		{name: "absolute subPath", subPath: "/etc", wantErr: `spec.containers[0].volumeMounts[1].subPath: "/etc" must be a relative path`},
		{name: "subPath with ..", subPath: "a/../..", wantErr: `spec.containers[0].volumeMounts[1].subPath: "a/../.." must not contain '..'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod([]corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				append(mounts, corev1.VolumeMount{Name: "data", MountPath: "/sub", SubPath: tt.subPath})...)
			pv, _ := setup(t, Source{Pod: pod})
			vol := pv.Paths["data"]
			if tt.prepare != nil {
				tt.prepare(t, vol)
			}
			got, err := pv.Mounts(&pod.Spec.Containers[0])
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Mounts error = %v, want %q", err, tt.wantErr)
				}
				if _, err := os.Lstat(filepath.Join(outside, "etc")); err == nil {
					t.Errorf("something was created outside the volume")
				}
				return
			}
			if err != nil {
				t.Fatalf("Mounts: %v", err)
			}
			if want := filepath.Join(vol, tt.want); got[1].Source != want {
				t.Errorf("subPath source = %s, want %s", got[1].Source, want)
			}
			if tt.created {
				fi, err := os.Stat(got[1].Source)
				if err != nil {
					t.Fatal(err)
				}
				// The kubelet gives a new subPath dir the mode of the volume root.
				if !fi.IsDir() || fi.Mode().Perm() != 0o777 {
					t.Errorf("created subPath: %v, want a 0777 dir like the emptyDir root", fi.Mode())
				}
			}
		})
	}
}

func mkdirs(rel string) func(*testing.T, string) {
	return func(t *testing.T, vol string) {
		if err := os.MkdirAll(filepath.Join(vol, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFiles(rel string) func(*testing.T, string) {
	return func(t *testing.T, vol string) {
		if err := os.WriteFile(filepath.Join(vol, rel), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(target, rel string) func(*testing.T, string) {
	return func(t *testing.T, vol string) {
		if err := os.Symlink(target, filepath.Join(vol, rel)); err != nil {
			t.Fatal(err)
		}
	}
}

func chain(fns ...func(*testing.T, string)) func(*testing.T, string) {
	return func(t *testing.T, vol string) {
		for _, f := range fns {
			f(t, vol)
		}
	}
}

func TestHostPathTypes(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	regular := filepath.Join(base, "file")
	sock := filepath.Join(base, "sock")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	block := findBlockDevice()
	missing := filepath.Join(base, "missing")

	type check func(t *testing.T, path string)
	isDir := func(mode fs.FileMode) check {
		return func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != mode {
				t.Errorf("%s: %v %v, want a %v dir", path, fi, err, mode)
			}
		}
	}
	isEmptyFile := func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v %v, want an empty 0644 file", path, fi, err)
		}
	}
	notCreated := func(t *testing.T, path string) {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was created (%v)", path, err)
		}
	}
	tests := []struct {
		name    string
		typ     corev1.HostPathType
		path    string
		check   check
		wantErr string
	}{
		{name: "unset, missing path: no check, nothing created", typ: "", path: missing, check: notCreated},
		{name: "unset, any file", typ: "", path: regular},
		{name: "DirectoryOrCreate existing", typ: corev1.HostPathDirectoryOrCreate, path: dir},
		{name: "DirectoryOrCreate creates 0755 with parents", typ: corev1.HostPathDirectoryOrCreate, path: filepath.Join(base, "new/nested"), check: isDir(0o755)},
		{name: "DirectoryOrCreate on a file", typ: corev1.HostPathDirectoryOrCreate, path: regular, wantErr: `is not a directory (type DirectoryOrCreate)`},
		{name: "Directory", typ: corev1.HostPathDirectory, path: dir},
		{name: "Directory on a file", typ: corev1.HostPathDirectory, path: regular, wantErr: `spec.volumes[2].hostPath: path "` + regular + `" is not a directory (type Directory)`},
		{name: "Directory missing", typ: corev1.HostPathDirectory, path: missing, wantErr: `spec.volumes[2].hostPath: path "` + missing + `" does not exist (type Directory)`},
		{name: "FileOrCreate existing", typ: corev1.HostPathFileOrCreate, path: regular},
		{name: "FileOrCreate creates an empty 0644 file", typ: corev1.HostPathFileOrCreate, path: filepath.Join(base, "newfile"), check: isEmptyFile},
		{name: "FileOrCreate needs the parent", typ: corev1.HostPathFileOrCreate, path: filepath.Join(base, "noparent/f"), wantErr: `parent directory of "` + filepath.Join(base, "noparent/f") + `" does not exist`},
		{name: "FileOrCreate on a dir", typ: corev1.HostPathFileOrCreate, path: dir, wantErr: `is not a file (type FileOrCreate)`},
		{name: "File", typ: corev1.HostPathFile, path: regular},
		{name: "File on a dir", typ: corev1.HostPathFile, path: dir, wantErr: `spec.volumes[2].hostPath: path "` + dir + `" is not a file (type File)`},
		{name: "File on a socket", typ: corev1.HostPathFile, path: sock, wantErr: `is not a file (type File)`},
		{name: "File missing", typ: corev1.HostPathFile, path: missing, wantErr: `does not exist (type File)`},
		{name: "Socket", typ: corev1.HostPathSocket, path: sock},
		{name: "Socket on a file", typ: corev1.HostPathSocket, path: regular, wantErr: `is not a socket file (type Socket)`},
		{name: "CharDevice", typ: corev1.HostPathCharDev, path: "/dev/null"},
		{name: "CharDevice on a file", typ: corev1.HostPathCharDev, path: regular, wantErr: `is not a character device (type CharDevice)`},
		{name: "BlockDevice", typ: corev1.HostPathBlockDev, path: block},
		{name: "BlockDevice on a char device", typ: corev1.HostPathBlockDev, path: "/dev/null", wantErr: `is not a block device (type BlockDevice)`},
		{name: "unknown type", typ: "Dir", path: dir, wantErr: `spec.volumes[2].hostPath.type: unsupported value "Dir"`},
		{name: "relative path", typ: "", path: "data", wantErr: `spec.volumes[2].hostPath.path: "data" must be an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path == "" {
				t.Skip("no block device on this host")
			}
			typ := tt.typ
			vols := []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tt.path, Type: &typ}}},
			}
			pod := testPod(vols, corev1.VolumeMount{Name: "host", MountPath: "/host"})
			if tt.wantErr != "" {
				setupErr(t, Source{Pod: pod}, tt.wantErr)
				return
			}
			pv, _ := setup(t, Source{Pod: pod})
			// The volume is the host path itself, not a copy.
			if pv.Paths["host"] != tt.path {
				t.Errorf("Paths[host] = %s, want %s", pv.Paths["host"], tt.path)
			}
			if tt.check != nil {
				tt.check(t, tt.path)
			}
		})
	}
}

func findBlockDevice() string {
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		if e.Type()&fs.ModeDevice != 0 && e.Type()&fs.ModeCharDevice == 0 {
			return filepath.Join("/dev", e.Name())
		}
	}
	return ""
}

// A failure after a hostPath was created undoes it (and everything else).
func TestSetupUndo(t *testing.T) {
	other := t.TempDir()
	dir := filepath.Join(t.TempDir(), "volumes")
	created := filepath.Join(other, "made/by/setup")
	// The second volume creates the directory the third (an emptyDir) needs:
	// a deterministic failure in the middle of the side effects.
	clash := filepath.Join(dir, "kubernetes.io~empty-dir", "clash")
	pod := testPod([]corev1.Volume{
		{Name: "made", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: created, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
		{Name: "squat", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: clash, Type: ptr(corev1.HostPathDirectoryOrCreate)}}},
		{Name: "clash", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	})
	_, err := Setup(dir, Source{Pod: pod})
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[2]") {
		t.Fatalf("Setup error = %v, want one about spec.volumes[2]", err)
	}
	for _, p := range []string{dir, filepath.Join(other, "made")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind after a failed Setup (%v)", p, err)
		}
	}
}

func TestSetupRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Setup(dir, Source{Pod: testPod(nil)})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Setup on a non-empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Errorf("Setup touched a dir it refused: %v", err)
	}
}

func TestMounts(t *testing.T) {
	hostDir := t.TempDir()
	cm := &corev1.ConfigMap{Data: map[string]string{"k": "v"}}
	pod := testPod([]corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}},
		cmVol("cfg", corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}),
		{Name: "nosource"}, // the API server defaults it to emptyDir
	},
		corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"},
		corev1.VolumeMount{Name: "host", MountPath: "/host", ReadOnly: true},
		corev1.VolumeMount{Name: "cfg", MountPath: "/etc/cfg"}, // configMap: always read-only
		corev1.VolumeMount{Name: "cfg", MountPath: "/etc/k", SubPath: "k"},
		corev1.VolumeMount{Name: "nosource", MountPath: "/n"},
	)
	pod.Spec.InitContainers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/s"}, {Name: "ghost", MountPath: "/g"}}
	pv, dir := setup(t, Source{Pod: pod, ConfigMaps: map[string]*corev1.ConfigMap{"c": cm}})

	ts, err := os.Readlink(filepath.Join(pv.Paths["cfg"], "..data"))
	if err != nil {
		t.Fatal(err)
	}
	rw, ro := []string{"rbind", "rprivate"}, []string{"rbind", "rprivate", "ro"}
	want := []specs.Mount{
		{Destination: "/scratch", Type: "bind", Source: filepath.Join(dir, "kubernetes.io~empty-dir/scratch"), Options: rw},
		{Destination: "/host", Type: "bind", Source: hostDir, Options: ro},
		{Destination: "/etc/cfg", Type: "bind", Source: filepath.Join(dir, "kubernetes.io~configmap/cfg"), Options: ro},
		// A subPath to a key resolves through ..data to the file itself, as
		// in the kubelet (which is why such mounts never see updates).
		{Destination: "/etc/k", Type: "bind", Source: filepath.Join(dir, "kubernetes.io~configmap/cfg", ts, "k"), Options: ro},
		{Destination: "/n", Type: "bind", Source: filepath.Join(dir, "kubernetes.io~empty-dir/nosource"), Options: rw},
	}
	// A copy of the container is matched by name.
	c := pod.Spec.Containers[0]
	got, err := pv.Mounts(&c)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Mounts (-want +got):\n%s", d)
	}

	_, err = pv.Mounts(&pod.Spec.InitContainers[0])
	if want := `spec.initContainers[0].volumeMounts[1].name: volume "ghost" not found`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Mounts(init) error = %v, want %q", err, want)
	}
	if _, err := pv.Mounts(&corev1.Container{Name: "stranger"}); err == nil {
		t.Error("Mounts of a container not in the pod: no error")
	}
	noMounts, err := pv.Mounts(&pod.Spec.Containers[1])
	if err != nil || len(noMounts) != 0 {
		t.Errorf("Mounts(no volumeMounts) = %v, %v", noMounts, err)
	}
}

func TestVolumeKinds(t *testing.T) {
	tests := []struct {
		name    string
		vols    []corev1.Volume
		wantErr string
	}{
		{
			name: "nfs",
			vols: []corev1.Volume{
				{Name: "ok", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "nas", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}}},
			},
			wantErr: `spec.volumes[1]: volume source "nfs" is not supported by podlab`,
		},
		{
			name:    "persistentVolumeClaim",
			vols:    []corev1.Volume{{Name: "pvc", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}},
			wantErr: `spec.volumes[0]: volume source "persistentVolumeClaim" is not supported by podlab`,
		},
		{
			name:    "two sources",
			vols:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}, HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}},
			wantErr: `spec.volumes[0]: may not specify more than 1 volume type (found hostPath, emptyDir)`,
		},
		{
			name:    "emptyDir HugePages",
			vols:    []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}}},
			wantErr: `spec.volumes[0].emptyDir.medium: "HugePages" is not supported by podlab`,
		},
		{
			name: "duplicate names",
			vols: []corev1.Volume{
				{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			wantErr: `spec.volumes[1].name: duplicate volume name "v"`,
		},
		{
			name:    "name that is not a path element",
			vols:    []corev1.Volume{{Name: "../x", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			wantErr: `spec.volumes[0].name: "../x": must be a DNS label`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setupErr(t, Source{Pod: testPod(tt.vols)}, tt.wantErr)
		})
	}
}

func TestProjectedErrors(t *testing.T) {
	sec := &corev1.Secret{Data: map[string][]byte{"token": []byte("s3cret"), "ca.crt": []byte("CA")}}
	cm := &corev1.ConfigMap{Data: map[string]string{"token": "not-a-secret", "config": "c"}}
	src := func(sources ...corev1.VolumeProjection) Source {
		return Source{
			Pod: testPod([]corev1.Volume{{Name: "proj", VolumeSource: corev1.VolumeSource{
				Projected: &corev1.ProjectedVolumeSource{Sources: sources},
			}}}),
			Secrets:    map[string]*corev1.Secret{"s": sec},
			ConfigMaps: map[string]*corev1.ConfigMap{"c": cm},
		}
	}
	secretAll := corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}
	cmItems := func(items ...corev1.KeyToPath) corev1.VolumeProjection {
		return corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: items}}
	}
	downward := func(path string) corev1.VolumeProjection {
		return corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}}}
	}
	tests := []struct {
		name    string
		src     Source
		wantErr string
	}{
		{
			name:    "configMap key over a secret key",
			src:     src(secretAll, cmItems(corev1.KeyToPath{Key: "config", Path: "config"}, corev1.KeyToPath{Key: "token", Path: "token"}), downward("podname")),
			wantErr: `spec.volumes[0].projected.sources[1].configMap.items[1].path: invalid value "token": conflicting duplicate paths (with spec.volumes[0].projected.sources[0].secret: Secret "s" key "token")`,
		},
		{
			name:    "downwardAPI path over a configMap path",
			src:     src(secretAll, cmItems(corev1.KeyToPath{Key: "config", Path: "meta/name"}), downward("meta/name")),
			wantErr: `spec.volumes[0].projected.sources[2].downwardAPI.items[0].path: invalid value "meta/name": conflicting duplicate paths (with spec.volumes[0].projected.sources[1].configMap.items[0].path)`,
		},
		{
			name:    "downwardAPI file where a configMap item needs a directory",
			src:     src(secretAll, cmItems(corev1.KeyToPath{Key: "config", Path: "meta/config"}), downward("meta")),
			wantErr: `spec.volumes[0].projected.sources[2].downwardAPI.items[0].path: invalid value "meta": conflicting duplicate paths`,
		},
		{
			name:    "serviceAccountToken",
			src:     src(secretAll, corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}),
			wantErr: `spec.volumes[0].projected.sources[1].serviceAccountToken: not supported by podlab`,
		},
		{
			name:    "clusterTrustBundle",
			src:     src(corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca.pem"}}),
			wantErr: `spec.volumes[0].projected.sources[0].clusterTrustBundle: not supported by podlab`,
		},
		{
			name:    "missing secret",
			src:     src(corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}}),
			wantErr: `spec.volumes[0].projected.sources[0].secret.name: Secret "nope" not found`,
		},
		{
			name:    "empty source",
			src:     src(corev1.VolumeProjection{}),
			wantErr: `spec.volumes[0].projected.sources[0]: one projection source is required`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setupErr(t, tt.src, tt.wantErr)
		})
	}
}

func TestParseMountPointsUnder(t *testing.T) {
	mi := []byte(`22 1 0:21 / /run rw,nosuid shared:5 - tmpfs tmpfs rw
30 22 0:30 / /run/pods/p1/volumes/kubernetes.io~secret/s rw - tmpfs tmpfs rw,size=1024k
31 22 0:31 / /run/pods/p1/volumes/kubernetes.io~empty-dir/with\040space rw - tmpfs tmpfs rw
32 30 0:32 / /run/pods/p1/volumes/kubernetes.io~secret/s/deeper rw - tmpfs tmpfs rw
33 30 0:33 / /run/pods/p1/volumes/kubernetes.io~secret/s rw - tmpfs tmpfs rw
34 22 0:34 / /run/pods/p1/volumes2/x rw - tmpfs tmpfs rw
35 22 0:35 / /run/pods/p1/volumes rw - tmpfs tmpfs rw
`)
	mounts, err := mountinfo.GetMountsFromReader(bytes.NewReader(mi), underFilter("/run/pods/p1/volumes/"))
	if err != nil {
		t.Fatal(err)
	}
	got := deepestFirst(mounts)
	want := []string{
		"/run/pods/p1/volumes/kubernetes.io~secret/s/deeper",
		"/run/pods/p1/volumes/kubernetes.io~empty-dir/with space",
		"/run/pods/p1/volumes/kubernetes.io~secret/s",
		"/run/pods/p1/volumes",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("mount points (-want +got):\n%s", d)
	}
}

func TestPodMemoryLimit(t *testing.T) {
	mem := func(s string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)}}
	}
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		spec corev1.PodSpec
		want int64
		ok   bool
	}{
		{"no limits", corev1.PodSpec{Containers: []corev1.Container{{}}}, 0, false},
		{"one container without a limit", corev1.PodSpec{Containers: []corev1.Container{{Resources: mem("1Mi")}, {}}}, 0, false},
		{"sum of app containers", corev1.PodSpec{Containers: []corev1.Container{{Resources: mem("1Mi")}, {Resources: mem("2Mi")}}}, 3 << 20, true},
		{"init container larger", corev1.PodSpec{InitContainers: []corev1.Container{{Resources: mem("8Mi")}}, Containers: []corev1.Container{{Resources: mem("1Mi")}}}, 8 << 20, true},
		{"sidecar adds", corev1.PodSpec{InitContainers: []corev1.Container{{Resources: mem("2Mi"), RestartPolicy: &always}}, Containers: []corev1.Container{{Resources: mem("1Mi")}}}, 3 << 20, true},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{{Resources: mem("1Mi")}}, Overhead: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}, 2 << 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := podMemoryLimit(&corev1.Pod{Spec: tt.spec})
			if got != tt.want || ok != tt.ok {
				t.Errorf("podMemoryLimit = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEmptyDirMemorySize(t *testing.T) {
	mem, err := memTotal()
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod(nil) // app container limit 64Mi, but "nolimits" has none: no pod limit
	env := &setupEnv{src: Source{Pod: pod}, dir: t.TempDir()}
	for _, tt := range []struct {
		name string
		ed   *corev1.EmptyDirVolumeSource
		want int64
	}{
		{"wrapped (secret/projected): node memory", nil, mem},
		{"sizeLimit", &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("1Mi"))}, 1 << 20},
		{"sizeLimit above node memory", &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(mem*2, resource.BinarySI)}, mem},
	} {
		got, err := emptyDirMemorySize(env, tt.ed)
		if err != nil || got != tt.want {
			t.Errorf("%s: emptyDirMemorySize = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	pod.Spec.Containers = pod.Spec.Containers[:1] // now every container has a memory limit
	if got, _ := emptyDirMemorySize(env, nil); got != 64<<20 {
		t.Errorf("with a pod memory limit: %d, want %d", got, 64<<20)
	}
}

func TestTeardownMissingDir(t *testing.T) {
	if err := Teardown(filepath.Join(t.TempDir(), "never-made")); err != nil {
		t.Errorf("Teardown of a missing dir: %v", err)
	}
}
