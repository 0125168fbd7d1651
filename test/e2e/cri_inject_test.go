package e2e

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// runtime-point rules for the CRI test: the CA bundle and an env for
// team-a (team-b is named too but excluded, and exclusion wins), and an env
// for pods labelled podlab-e2e/inject=yes in any namespace.
const criInjection = `injection:
  rules:
  - name: team-ca
    ca: true
    point: runtime
    namespaces: [team-a, team-b]
    excludeNamespaces: [team-b]
    env: [{name: PODLAB_TEAM, value: team-rule}]
  - name: labelled
    point: runtime
    excludeNamespaces: []
    podSelector: {matchLabels: {podlab-e2e/inject: "yes"}}
    env: [{name: PODLAB_LABELLED, value: label-rule}]
`

// A pod created through the CRI, with no kubelet in the way, gets what the
// runtime-point rules select by its sandbox's namespace and labels, in its
// live process; what the rules exclude it does not get; podlab verify
// agrees on every pod.
func TestCRIRuntimeInjection(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, criInjection)

	caPaths := []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}
	caEnv := []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
	type want struct {
		ca             bool
		team, labelled bool
	}
	pods := []struct {
		name, ns string
		label    string
		want     want
	}{
		{"inj-a", "team-a", "yes", want{ca: true, team: true, labelled: true}},
		{"inj-b", "team-b", "no", want{}},
		{"inj-c", "team-c", "yes", want{labelled: true}},
	}
	ctrIDs, podIDs := map[string]string{}, map[string]string{}
	for _, p := range pods {
		podID, cfg := s.runPod(t, s.podConfig(p.name, p.ns, map[string]string{"podlab-e2e/inject": p.label}))
		id := s.createCtr(t, podID, cfg, ctrConfig("app", "sleep", "600"))
		s.crictlOK(t, "start", id)
		s.waitCtrState(t, id, "CONTAINER_RUNNING")
		ctrIDs[p.name], podIDs[p.name] = id, podID
	}
	pids := map[string]int{}
	for _, c := range s.podlabCtrs(t) {
		pids[c.ID] = c.PID
	}

	for _, p := range pods {
		t.Run(p.name, func(t *testing.T) {
			id := ctrIDs[p.name]
			pid := pids[id]
			if !alive(pid) {
				t.Fatalf("podlab ps gives container %s pid %d, not a live process", id[:12], pid)
			}
			// The live process: /proc/<pid>/environ and mountinfo, seen
			// from the host, and env as an exec in the container sees it.
			environ := procEnv(t, pid)
			execEnv := map[string]string{}
			for _, l := range strings.Split(s.crictlOK(t, "exec", "-s", id, "env"), "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					execEnv[k] = v
				}
			}
			mounts := procMounts(t, pid)
			for _, k := range caEnv {
				checkEnv(t, "environ", environ, k, caPaths[0], p.want.ca)
				checkEnv(t, "crictl exec env", execEnv, k, caPaths[0], p.want.ca)
			}
			checkEnv(t, "environ", environ, "PODLAB_TEAM", "team-rule", p.want.team)
			checkEnv(t, "crictl exec env", execEnv, "PODLAB_TEAM", "team-rule", p.want.team)
			checkEnv(t, "environ", environ, "PODLAB_LABELLED", "label-rule", p.want.labelled)
			checkEnv(t, "crictl exec env", execEnv, "PODLAB_LABELLED", "label-rule", p.want.labelled)
			for _, path := range caPaths {
				ro, mounted := mounts[path]
				switch {
				case p.want.ca && !mounted:
					t.Errorf("no mount at %s in /proc/%d/mountinfo", path, pid)
				case p.want.ca && !ro:
					t.Errorf("the CA bundle at %s is mounted read-write", path)
				case !p.want.ca && mounted:
					t.Errorf("a mount at %s, which no rule gives this pod", path)
				}
			}
			if p.want.ca {
				bundle := s.crictlOK(t, "exec", "-s", id, "cat", caPaths[0])
				if !strings.HasPrefix(bundle, "-----BEGIN CERTIFICATE-----") {
					t.Errorf("%s in the container does not hold PEM certificates: %.80q", caPaths[0], bundle)
				}
			}
			// verify recomputes the rules and checks every layer and the
			// live processes (pause included) against them.
			if r := s.podlab("-n", p.ns, "verify", p.name); r.code != 0 {
				t.Errorf("podlab -n %s verify %s: exit %d\n%s%s", p.ns, p.name, r.code, r.stdout, r.stderr)
			}
		})
	}

	for _, p := range pods {
		s.crictlOK(t, "stopp", podIDs[p.name])
		s.crictlOK(t, "rmp", podIDs[p.name])
	}
	if pods := s.listPods(t); len(pods) != 0 {
		t.Errorf("crictl pods after rmp: %+v", pods)
	}
	noState(t)
}

func checkEnv(t *testing.T, where string, env map[string]string, key, value string, want bool) {
	t.Helper()
	got, ok := env[key]
	switch {
	case want && !ok:
		t.Errorf("%s lacks %s", where, key)
	case want && got != value:
		t.Errorf("%s: %s=%q, want %q", where, key, got, value)
	case !want && ok:
		t.Errorf("%s has %s=%q, which no rule gives this pod", where, key, got)
	}
}

// procEnv reads /proc/<pid>/environ.
func procEnv(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// procMounts reads /proc/<pid>/mountinfo: mount point → read-only.
func procMounts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		ro := false
		for _, o := range strings.Split(fields[5], ",") {
			ro = ro || o == "ro"
		}
		mounts[fields[4]] = ro
	}
	return mounts
}
