package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
)

func podWith(container, extraSpec string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n" + extraSpec + "  containers:\n  - name: a\n    image: busybox\n    command: [\"true\"]\n" + container
}

// badManifests: each must fail `podlab run` naming the field or cause.
var badManifests = []struct{ name, manifest, want string }{
	{"env name with =", podWith("    env: [{name: \"A=B\", value: x}]\n", ""), "spec.containers[0].env[0].name"},
	{"env name with NUL", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bad"},"spec":{"containers":[{"name":"a","image":"busybox","env":[{"name":"A\u0000B","value":"x"}]}]}}`, "spec.containers[0].env[0].name"},
	{"unterminated $(VAR)", podWith("    env: [{name: A, value: \"$(B\"}]\n", ""), "spec.containers[0].env[0].value"},
	{"empty $() in args", podWith("    args: [\"$()\"]\n", ""), "spec.containers[0].args[0]"},
	{"unknown volume referenced", podWith("    volumeMounts: [{name: nope, mountPath: /x}]\n", ""), "spec.containers[0].volumeMounts[0].name"},
	{"relative mountPath", podWith("    volumeMounts: [{name: v, mountPath: x}]\n", "  volumes: [{name: v, emptyDir: {}}]\n"), "spec.containers[0].volumeMounts[0].mountPath"},
	{"mountPath with ..", podWith("    volumeMounts: [{name: v, mountPath: /a/../../etc}]\n", "  volumes: [{name: v, emptyDir: {}}]\n"), "spec.containers[0].volumeMounts[0].mountPath"},
	{"absolute subPath", podWith("    volumeMounts: [{name: v, mountPath: /x, subPath: /etc}]\n", "  volumes: [{name: v, emptyDir: {}}]\n"), "spec.containers[0].volumeMounts[0].subPath"},
	{"subPath with ..", podWith("    volumeMounts: [{name: v, mountPath: /x, subPath: ../../etc}]\n", "  volumes: [{name: v, emptyDir: {}}]\n"), "spec.containers[0].volumeMounts[0].subPath"},
	{"relative hostPath", podWith("", "  volumes: [{name: v, hostPath: {path: etc}}]\n"), "spec.volumes[0].hostPath.path"},
	{"hostPath with ..", podWith("", "  volumes: [{name: v, hostPath: {path: /tmp/../etc}}]\n"), "spec.volumes[0].hostPath.path"},
	{"hostPath type mismatch", podWith("", "  volumes: [{name: v, hostPath: {path: /etc/hostname, type: Directory}}]\n"), "not a directory"},
	{"hostPath missing", podWith("", "  volumes: [{name: v, hostPath: {path: /nonexistent-podlab, type: File}}]\n"), "/nonexistent-podlab"},
	{"bad hostPath type", podWith("", "  volumes: [{name: v, hostPath: {path: /tmp, type: Folder}}]\n"), "spec.volumes[0].hostPath.type"},
	{"configMap item path with ..", podWith("", "  volumes: [{name: v, configMap: {name: c, items: [{key: k, path: ../x}]}}]\n") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\n", "spec.volumes[0].configMap.items[0].path"},
	{"configMap key invalid", podWith("", "") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {\"a/b\": v}\n", "a/b"},
	{"secret item path absolute", podWith("", "  volumes: [{name: v, secret: {secretName: s, items: [{key: k, path: /etc/x}]}}]\n") + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n", "spec.volumes[0].secret.items[0].path"},
	{"downwardAPI path with ..", podWith("", "  volumes: [{name: v, downwardAPI: {items: [{path: ../l, fieldRef: {fieldPath: metadata.labels}}]}}]\n"), "spec.volumes[0].downwardAPI.items[0].path"},
	{"missing configMap", podWith("    env: [{name: A, valueFrom: {configMapKeyRef: {name: gone, key: k}}}]\n", ""), "spec.containers[0].env[0].valueFrom.configMapKeyRef.name"},
	{"missing secret key", podWith("    env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: nope}}}]\n", "") + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\n", "nope"},
	{"bad fieldPath", podWith("    env: [{name: A, valueFrom: {fieldRef: {fieldPath: spec.secret}}}]\n", ""), "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"},
	{"unknown image", strings.Replace(podWith("", ""), "image: busybox", "image: nosuch/img:9\n    imagePullPolicy: Never", 1), `image "nosuch/img:9" not found`},
	{"empty image", strings.Replace(podWith("", ""), "image: busybox", "image: \"\"", 1), "spec.containers[0].image"},
	{"two pods", podWith("", "") + "---\n" + podWith("", ""), "Pod"},
	{"bad namespace", strings.Replace(podWith("", ""), "{name: bad}", "{name: bad, namespace: Team_A}", 1), "metadata.namespace"},
	{"container name upper case", strings.Replace(podWith("", ""), "name: a\n", "name: App\n", 1), "spec.containers[0].name"},
	{"two volume sources", podWith("", "  volumes: [{name: v, emptyDir: {}, hostPath: {path: /tmp}}]\n"), "spec.volumes[0]"},
	{"unsupported volume type", podWith("", "  volumes: [{name: v, nfs: {server: s, path: /}}]\n"), "nfs"},
	{"bad port", podWith("    ports: [{containerPort: 70000}]\n", ""), "spec.containers[0].ports[0].containerPort"},
	{"negative runAsUser", podWith("    securityContext: {runAsUser: -1}\n", ""), "spec.containers[0].securityContext.runAsUser"},
	{"defaultMode out of range", podWith("", "  volumes: [{name: v, secret: {secretName: s, defaultMode: 4096}}]\n") + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", "defaultMode"},
	{"unknown extended resource", podWith("    resources: {limits: {example.com/fpga: 1}}\n", ""), `"example.com/fpga"`},
}

func TestBadInputs(t *testing.T) {
	rootSetup(t)
	tried := len(badManifests)
	for _, tc := range badManifests {
		t.Run("manifest/"+tc.name, func(t *testing.T) {
			r := podlab(t, tc.manifest, "run", "-q", "-f", "-")
			r.failsNaming(t, "run", tc.want)
			noState(t)
			testutil.LeakCheck(t)
		})
	}

	dir := t.TempDir()
	hang := filepath.Join(dir, "bin")
	os.MkdirAll(hang, 0o755)
	os.WriteFile(filepath.Join(hang, "podlab-hang"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("this is not a certificate\n"), 0o644)
	configs := []struct {
		name, yaml string
		args       []string
		want       string
	}{
		{"invalid CNI conflist", "cni:\n  conflist: '{\"cniVersion\": \"1.1.0\", \"name\": \"x\", \"plugins\": [}'\n", nil, "cni.conflist"},
		{"conflist without plugins", "cni:\n  conflist: '{\"cniVersion\": \"1.1.0\", \"name\": \"x\", \"plugins\": []}'\n", nil, "cni.conflist"},
		{"CNI plugin that hangs", "cni:\n  binDirs: [/opt/podlab/cni/bin, " + hang + "]\n  pluginTimeoutSeconds: 1\n  conflist: '{\"cniVersion\": \"1.1.0\", \"name\": \"hang\", \"plugins\": [{\"type\": \"podlab-hang\"}]}'\n", nil, "timed out after 1s"},
		{"CNI bin dir without plugins", "cni:\n  binDirs: [" + dir + "]\n", nil, `failed to find plugin "bridge"`},
		{"CA file not PEM", "", []string{"--ca-file", notPEM}, "not a PEM certificate"},
		{"bad env policy", "envPolicy: newest-wins\n", nil, "envPolicy"},
		{"relative state dir", "stateDir: run/podlab\n", nil, "stateDir"},
		{"unknown config key", "stateDirectory: /x\n", nil, "stateDirectory"},
	}
	base, _ := os.ReadFile(configPath)
	for i, tc := range configs {
		t.Run("config/"+tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
			os.WriteFile(cfg, append(append([]byte(nil), base...), tc.yaml...), 0o644)
			args := append([]string{"--config", cfg, "run", "-q", "-f", "-"}, tc.args...)
			r := podlabRaw(t, podWith("", ""), args...)
			r.failsNaming(t, "run", tc.want)
			noState(t)
			testutil.LeakCheck(t)
		})
		tried++
	}

	// Image archives that try to write outside the rootfs, or carry devices.
	images := []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"../ entry", []tar.Header{{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}}, "escape"},
		{"absolute .. entry", []tar.Header{{Name: "/a/../../escape", Typeflag: tar.TypeReg, Mode: 0o644}}, "escape"},
		{"hardlink out of the rootfs", []tar.Header{{Name: "passwd", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}, "passwd"},
		{"hardlink to a missing file", []tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "nothing"}}, "nothing"},
		{"device node", []tar.Header{{Name: "dev/sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o600}}, "dev/sda"},
	}
	for _, tc := range images {
		t.Run("image/"+tc.name, func(t *testing.T) {
			archive := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".tar")
			writeDockerSave(t, archive, tc.entries)
			r := podlab(t, "", "image", "import", "evil:1", archive)
			r.failsNaming(t, "import", tc.want)
			if ls := podlab(t, "", "image", "ls"); strings.Contains(ls.stdout, "evil") {
				t.Fatal("a rejected image is in the store")
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
				t.Fatal("an entry escaped the rootfs")
			}
		})
		tried++
	}
	// A symlink pointing out of the rootfs is legal in images (absolute
	// links are common) but later entries written through it stay inside.
	t.Run("image/write through an escaping symlink", func(t *testing.T) {
		target := filepath.Join(dir, "outside")
		os.MkdirAll(target, 0o755)
		archive := filepath.Join(dir, "symlink.tar")
		writeDockerSave(t, archive, []tar.Header{
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: target},
			{Name: "link/planted", Typeflag: tar.TypeReg, Mode: 0o644},
		})
		podlab(t, "", "image", "import", "evil:2", archive)
		defer podlab(t, "", "image", "rm", "evil:2")
		if _, err := os.Stat(filepath.Join(target, "planted")); err == nil {
			t.Fatal("a file was written outside the rootfs through a symlink")
		}
	})
	tried++
	t.Logf("bad inputs tried: %d", tried)
	if tried < 40 {
		t.Fatalf("only %d bad inputs", tried)
	}
}

// podlabRaw runs podlab with exactly args (no --config added).
func podlabRaw(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	saved := configPath
	defer func() { configPath = saved }()
	// podlab() prepends --config configPath; a later --config wins in cobra.
	return podlab(t, stdin, args...)
}

// writeDockerSave writes a one-layer docker-save archive whose layer holds entries.
func writeDockerSave(t *testing.T, path string, entries []tar.Header) {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, h := range entries {
		h := h
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := lw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			lw.Write([]byte("x"))
		}
	}
	lw.Close()
	cfg := []byte(`{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["` + sha(layer.Bytes()) + `"]}}`)
	manifest := []byte(`[{"Config":"config.json","RepoTags":["evil:1"],"Layers":["layer.tar"]}]`)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"config.json", cfg}, {"layer.tar", layer.Bytes()}} {
		w.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data))})
		w.Write(e.data)
	}
	w.Close()
}

func sha(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
