//lint:file-ignore SA1019 the deprecated seccomp_profile_path is tested on purpose: containerd still honours it, and so does podlab

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// noMkdirProfile is a Localhost profile that allows everything but mkdir.
const noMkdirProfile = `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`

// buildSysprobe builds test/sysprobe statically into dir: it makes one
// system call and prints ok or the errno's name.
func buildSysprobe(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sysprobe")
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", bin, "../sysprobe/sysprobe.c").CombinedOutput(); err != nil {
		t.Fatalf("building sysprobe: %v\n%s", err, out)
	}
	return bin
}

// The CRI path does what the request says: RuntimeDefault is moby's
// default profile, Unconfined and no profile at all run unconfined, a
// Localhost file is loaded, a missing or malformed one is refused. Each
// denial is told apart from a missing capability: the same call succeeds,
// or fails otherwise, unconfined with the same capabilities.
func TestCRISeccompProfiles(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	tmp := t.TempDir()
	probe := buildSysprobe(t, tmp)
	noMkdir := filepath.Join(tmp, "no-mkdir.json")
	malformed := filepath.Join(tmp, "malformed.json")
	for path, body := range map[string]string{noMkdir: noMkdirProfile, malformed: `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [`} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	podCfg := s.podConfig("seccomp", "default", nil)
	podID, _ := s.runPod(t, podCfg)
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return c
	}
	profile := func(typ pb.SecurityProfile_ProfileType, ref string) *pb.SecurityProfile {
		return &pb.SecurityProfile{ProfileType: typ, LocalhostRef: ref}
	}
	rd, un := profile(pb.SecurityProfile_RuntimeDefault, ""), profile(pb.SecurityProfile_Unconfined, "")
	// start runs a container with the probe mounted at /sysprobe.
	start := func(name string, sp *pb.SecurityProfile, oldPath string, addCaps ...string) string {
		t.Helper()
		cfg := ctrConfig(name, "sleep", "600")
		cfg.Mounts = []*pb.Mount{{ContainerPath: "/sysprobe", HostPath: probe, Readonly: true}}
		sc := cfg.Linux.SecurityContext
		sc.Seccomp, sc.SeccompProfilePath = sp, oldPath
		sc.Capabilities = &pb.Capability{AddCapabilities: addCaps}
		r, err := rt.CreateContainer(ctx(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err != nil {
			t.Fatalf("CreateContainer %s: %v", name, err)
		}
		if _, err := rt.StartContainer(ctx(), &pb.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
			t.Fatalf("StartContainer %s: %v", name, err)
		}
		return r.ContainerId
	}
	execSync := func(id string, cmd ...string) (string, int32) {
		t.Helper()
		r, err := rt.ExecSync(ctx(), &pb.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
		if err != nil {
			t.Fatalf("ExecSync %v: %v", cmd, err)
		}
		return strings.TrimSpace(string(r.Stdout) + string(r.Stderr)), r.ExitCode
	}

	ctrs := map[string]string{
		"default":          start("default", rd, ""),
		"unconfined":       start("unconfined", un, ""),
		"none":             start("none", nil, ""),
		"default-admin":    start("default-admin", rd, "", "SYS_ADMIN", "SYS_PTRACE"),
		"unconfined-admin": start("unconfined-admin", un, "", "SYS_ADMIN", "SYS_PTRACE"),
		"old-path":         start("old-path", nil, "runtime/default"),
	}
	probes := []struct {
		ctr  string
		args []string
		want string
	}{
		// RuntimeDefault denies what the unconfined container may do with
		// the same (default) capabilities.
		{"default", []string{"unshare-userns"}, "EPERM"},
		{"unconfined", []string{"unshare-userns"}, "ok"},
		{"none", []string{"unshare-userns"}, "ok"},
		{"old-path", []string{"unshare-userns"}, "EPERM"},
		{"default", []string{"keyctl"}, "EPERM"},
		{"unconfined", []string{"keyctl"}, "ok"},
		// No capability unlocks keyctl under RuntimeDefault.
		{"default-admin", []string{"keyctl"}, "EPERM"},
		// mount of a missing directory: the kernel looks the target up
		// before it checks CAP_SYS_ADMIN (ENOENT); seccomp stops the call
		// before either (EPERM).
		{"default", []string{"mount", "/nonexistent"}, "EPERM"},
		{"unconfined", []string{"mount", "/nonexistent"}, "ENOENT"},
		{"unconfined", []string{"mount", "/tmp"}, "EPERM"},
		{"unconfined-admin", []string{"mount", "/tmp"}, "ok"},
		// moby's profile gives mount to CAP_SYS_ADMIN, as Docker does.
		{"default-admin", []string{"mount", "/tmp"}, "ok"},
		// ptrace of a sibling of another uid needs CAP_SYS_PTRACE. moby's
		// profile allows ptrace itself on kernels >= 4.8 (the seccomp
		// bypass through ptrace was fixed there), so under RuntimeDefault
		// as unconfined it is the capability that decides.
		{"default", []string{"ptrace-sibling"}, "EPERM"},
		{"unconfined", []string{"ptrace-sibling"}, "EPERM"},
		{"default-admin", []string{"ptrace-sibling"}, "ok"},
		{"unconfined-admin", []string{"ptrace-sibling"}, "ok"},
	}
	for _, p := range probes {
		if out, _ := execSync(ctrs[p.ctr], append([]string{"/sysprobe"}, p.args...)...); out != p.want {
			t.Errorf("%s: sysprobe %s = %q, want %q", p.ctr, strings.Join(p.args, " "), out, p.want)
		}
	}
	for name, want := range map[string]string{"default": "2", "default-admin": "2", "old-path": "2", "unconfined": "0", "none": "0", "unconfined-admin": "0"} {
		if out, _ := execSync(ctrs[name], "sh", "-c", "grep '^Seccomp:' /proc/1/status"); strings.Fields(out)[len(strings.Fields(out))-1] != want {
			t.Errorf("%s: /proc/1/status %q, want Seccomp: %s", name, out, want)
		}
	}

	// A Localhost profile that blocks mkdir: mkdir fails EPERM, the rest works.
	for name, sp := range map[string]*pb.SecurityProfile{"localhost": profile(pb.SecurityProfile_Localhost, noMkdir), "localhost-old-path": nil} {
		oldPath := ""
		if sp == nil {
			oldPath = "localhost/" + noMkdir
		}
		id := start(name, sp, oldPath)
		if out, code := execSync(id, "mkdir", "/tmp/d"); code == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("%s: mkdir under a profile that blocks it: exit %d, %q", name, code, out)
		}
		if out, code := execSync(id, "touch", "/tmp/f"); code != 0 {
			t.Errorf("%s: touch: exit %d, %q", name, code, out)
		}
	}
	if out, code := execSync(ctrs["default"], "mkdir", "/tmp/d"); code != 0 {
		t.Errorf("default: mkdir: exit %d, %q", code, out)
	}

	// A missing or malformed profile file: InvalidArgument naming the
	// file, and no container, bundle or record left.
	listed := func() int {
		r, err := rt.ListContainers(ctx(), &pb.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Containers)
	}
	bundles := func() int {
		ents, _ := os.ReadDir(filepath.Join(stateDir, "pods", podID, "containers"))
		return len(ents)
	}
	before, beforeBundles := listed(), bundles()
	for name, file := range map[string]string{"missing": filepath.Join(tmp, "missing.json"), "malformed": malformed} {
		cfg := ctrConfig("bad-"+name, "sleep", "600")
		cfg.Linux.SecurityContext.Seccomp = profile(pb.SecurityProfile_Localhost, file)
		_, err := rt.CreateContainer(ctx(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), file) {
			t.Errorf("CreateContainer with a %s profile: %v, want InvalidArgument naming %s", name, err, file)
		}
	}
	if after, afterBundles := listed(), bundles(); after != before || afterBundles != beforeBundles {
		t.Errorf("refused creates left containers (%d -> %d) or bundles (%d -> %d)", before, after, beforeBundles, afterBundles)
	}
}

// podlab run asks for RuntimeDefault unless the pod or the container says
// otherwise; inspect shows the profile at the OCI layer and verify checks
// the live process runs under it.
func TestRunSeccompDefault(t *testing.T) {
	rootSetup(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "profiles", "no-mkdir.json"), []byte(noMkdirProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "podlab.yaml")
	if err := os.WriteFile(cfg, append(base, "seccompProfileRoot: "+root+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) result {
		t.Helper()
		return podlabWith(t, podlabBin, cfg, stdin, args...)
	}
	const pod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-seccomp}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: confined
    image: busybox
    command: ["sleep", "300"]
  - name: free
    image: busybox
    command: ["sleep", "300"]
    securityContext:
      seccompProfile: {type: Unconfined}
  - name: nomkdir
    image: busybox
    command: ["sleep", "300"]
    securityContext:
      seccompProfile: {type: Localhost, localhostProfile: profiles/no-mkdir.json}
`
	if r := run(pod, "run", "-q", "-f", "-"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { run("", "rm", "-f", "e2e-seccomp") })

	r := run("", "verify", "e2e-seccomp", "-o", "json")
	var v struct {
		OK     bool
		Checks []struct {
			Container, Item, Detail string
			OK                      bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !v.OK {
		t.Errorf("verify: exit %d, ok %v, %v:\n%s%s", r.code, v.OK, err, r.stdout, r.stderr)
	}
	want := map[string]string{
		"confined": "Seccomp: 2 (filter), as RuntimeDefault asks",
		"free":     "Seccomp: 0 (disabled), unconfined as config.json asks",
		"nomkdir":  "Seccomp: 2 (filter), as Localhost " + filepath.Join(root, "profiles", "no-mkdir.json") + " asks",
	}
	for _, c := range v.Checks {
		if c.Item == "seccomp" {
			if c.Detail != want[c.Container] || !c.OK {
				t.Errorf("verify %s: seccomp %q (ok %v), want %q", c.Container, c.Detail, c.OK, want[c.Container])
			}
			delete(want, c.Container)
		}
	}
	if len(want) > 0 {
		t.Errorf("verify checked no seccomp for %v", want)
	}
	r = run("", "inspect", "e2e-seccomp", "-c", "confined", "--layer", "all")
	for _, want := range []string{"SECCOMP  RuntimeDefault (defaultAction SCMP_ACT_ERRNO, ", "SECCOMP  2 (filter)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect: want %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if r := run("", "exec", "e2e-seccomp", "-c", "confined", "--", "unshare", "-U", "true"); r.code == 0 {
		t.Errorf("unshare -U under RuntimeDefault succeeded")
	}
	if r := run("", "exec", "e2e-seccomp", "-c", "free", "--", "unshare", "-U", "true"); r.code != 0 {
		t.Errorf("unshare -U unconfined: exit %d %s", r.code, r.stderr)
	}
	if r := run("", "exec", "e2e-seccomp", "-c", "nomkdir", "--", "mkdir", "/tmp/d"); r.code == 0 || !strings.Contains(r.stderr+r.stdout, "Operation not permitted") {
		t.Errorf("mkdir under the Localhost profile: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// A podlab built without the seccomp tag refuses a container that asks for
// a profile, naming the cause, rather than run it unconfined; it leaves
// nothing behind.
func TestNoSeccompBuildRefusesProfiles(t *testing.T) {
	rootSetup(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "podlab")
	build := exec.Command("go", "build", "-tags=", "-o", bin, "../../cmd/podlab")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building podlab without the seccomp tag: %v\n%s", err, out)
	}
	base, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Dir(podlabBin)
	cfg := filepath.Join(dir, "podlab.yaml")
	extra := "pauseBinary: " + filepath.Join(binDir, "podlab-pause") + "\nshimBinary: " + filepath.Join(binDir, "podlab-shim") + "\n"
	if err := os.WriteFile(cfg, append(base, extra...), 0o644); err != nil {
		t.Fatal(err)
	}
	const pod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-noseccomp}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
`
	r := podlabWith(t, bin, cfg, pod, "run", "-q", "-f", "-")
	if r.code == 0 {
		podlabWith(t, bin, cfg, "", "rm", "-f", "e2e-noseccomp")
		t.Fatalf("podlab without seccomp ran a RuntimeDefault container:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "RuntimeDefault profile asked for: this podlab was built without seccomp support") {
		t.Errorf("run: exit %d, want the cause named:\n%s", r.code, r.stderr)
	}
	noState(t)
}
