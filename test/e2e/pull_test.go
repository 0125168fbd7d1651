package e2e

// Registry pulls through the podlab binary: a private registry as a user
// runs one (Debian's docker-registry, TLS from a test CA, htpasswd), a pull
// killed midway, and `podlab run` pulling an image only a loopback mirror
// has. Every registry is the test's own, on 127.0.0.1.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podlab/podlab/internal/testregistry"
)

// writeConfig is TestMain's config plus extra YAML, in dir.
func writeConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	base, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "podlab.yaml")
	if err := os.WriteFile(p, []byte(mergeConfig(string(base), extra)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func podlabConfig(t *testing.T, cfg string, args ...string) result {
	t.Helper()
	return runCmd(podlabBin, append([]string{"--config", cfg}, args...)...)
}

// privateImageDir points a config at an image store of its own.
func privateImageDir(t *testing.T) string {
	return "imageDir: " + filepath.Join(t.TempDir(), "images") + "\n"
}

// testCA makes a CA and a server certificate for 127.0.0.1, PEM files in dir.
func testCA(t *testing.T, dir string) (caFile, certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podlab test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, certFile, keyFile, pool
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strings.TrimPrefix(l.Addr().String(), "127.0.0.1:")
}

// needTool finds a tool setup.sh installs: missing, it fails the test under
// CI=true and skips it otherwise.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (scripts/setup.sh installs Debian's %s)", name, pkg)
	}
	t.Skipf("%s not found: apt-get install %s (scripts/setup.sh does)", name, pkg)
	return ""
}

// startDockerRegistry runs Debian's docker-registry (the CNCF distribution
// registry) on 127.0.0.1 with TLS from the test CA and htpasswd auth for
// alice:s3cret. It returns host:port.
func startDockerRegistry(t *testing.T, dir, certFile, keyFile string) string {
	t.Helper()
	bin := needTool(t, "docker-registry", "docker-registry")
	htpasswd := needTool(t, "htpasswd", "apache2-utils")
	out, err := exec.Command(htpasswd, "-Bbn", "alice", "s3cret").Output()
	if err != nil {
		t.Fatalf("htpasswd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	host := "127.0.0.1:" + freePort(t)
	cfg := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: %s}
http:
  addr: %s
  tls: {certificate: %s, key: %s}
auth:
  htpasswd: {realm: podlab-test, path: %s}
`, filepath.Join(dir, "storage"), host, certFile, keyFile, filepath.Join(dir, "htpasswd"))
	cfgPath := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(dir, "registry.log"))
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", host); err == nil {
			c.Close()
			return host
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
	t.Fatalf("docker-registry did not listen on %s:\n%s", host, log)
	return ""
}

// A user's private registry: TLS from their own CA, htpasswd. The right
// credentials pull; none fail naming 401; without the CA the error names
// the certificate.
func TestPullPrivateRegistry(t *testing.T) {
	rootSetup(t)
	dir := t.TempDir()
	caFile, certFile, keyFile, pool := testCA(t, dir)
	host := startDockerRegistry(t, dir, certFile, keyFile)
	img := testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t),
		testregistry.Layer(t, testregistry.File{Path: "etc/private", Body: []byte("yes\n")}))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	testregistry.PushTo(t, host+"/team/private:1", img, remote.WithTransport(tr),
		remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	ref := host + "/team/private:1"
	hosts := fmt.Sprintf("registry:\n  hosts:\n    %q: {caFile: %s}\n", host, caFile)

	withCA := writeConfig(t, t.TempDir(), privateImageDir(t)+hosts)
	podlabConfig(t, withCA, "image", "pull", ref).failsNaming(t, "a pull without credentials", "401 Unauthorized")
	podlabConfig(t, withCA, "image", "pull", "--user", "alice:wrong", ref).failsNaming(t, "a pull with a wrong password", "401 Unauthorized")
	r := podlabConfig(t, withCA, "image", "pull", "--user", "alice:s3cret", ref)
	if r.code != 0 {
		t.Fatalf("pull with credentials: %s", r.stderr)
	}
	cfgDigest, _ := img.ConfigName()
	if r.stdout != ref+" "+cfgDigest.String()+"\n" {
		t.Errorf("pull printed %q, want the name and ID (no progress off a terminal)", r.stdout)
	}
	// The credentials from a docker config.json named in the config.
	dockerCfg := filepath.Join(dir, "docker-config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	os.WriteFile(dockerCfg, []byte(fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, "https://"+host, auth)), 0o600)
	withAuth := writeConfig(t, t.TempDir(), privateImageDir(t)+hosts+"  dockerConfig: "+dockerCfg+"\n")
	if r := podlabConfig(t, withAuth, "image", "pull", ref); r.code != 0 {
		t.Fatalf("pull with the docker config.json's credentials: %s", r.stderr)
	}
	// Without the CA: the certificate is named, and nothing falls back to
	// plain HTTP.
	noCA := writeConfig(t, t.TempDir(), privateImageDir(t))
	r = podlabConfig(t, noCA, "image", "pull", "--user", "alice:s3cret", ref)
	r.failsNaming(t, "a pull without the CA", "certificate signed by unknown authority")
	if r := podlabConfig(t, noCA, "image", "ls"); strings.Contains(r.stdout, "private") {
		t.Errorf("a failed pull listed an image:\n%s", r.stdout)
	}
}

// A pull killed with SIGKILL midway lists no image; the next one fetches
// only the blobs the first had not verified (the config is one of those it
// had).
func TestPullKill9Resumes(t *testing.T) {
	rootSetup(t)
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	img := testregistry.Image(t, goruntime.GOARCH, base,
		testregistry.Layer(t, testregistry.File{Path: "etc/a", Body: []byte("a")}),
		testregistry.Layer(t, testregistry.File{Path: "etc/b", Body: []byte("b")}))
	reg.Push(t, "k9/app:1", img)
	m, _ := img.Manifest()
	last := m.Layers[2].Digest
	imageDir := filepath.Join(t.TempDir(), "images")
	cfg := writeConfig(t, t.TempDir(), "imageDir: "+imageDir+"\n")
	release := make(chan struct{})
	defer close(release)
	reg.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/blobs/"+last.String()) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return true
		}
		return false
	})
	cmd := exec.Command(podlabBin, "--config", cfg, "image", "pull", reg.Ref("k9/app:1"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		blobs, _ := filepath.Glob(filepath.Join(imageDir, "blobs", "sha256", "*"))
		if len(blobs) == 3 { // the config and the first two layers
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the config and the first two layers never reached the cache (%v)", blobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if r := podlabConfig(t, cfg, "image", "ls", "-o", "json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("after kill -9: image ls = %q %s", r.stdout, r.stderr)
	}
	reg.SetHook(nil)
	reg.Reset()
	if r := podlabConfig(t, cfg, "image", "pull", reg.Ref("k9/app:1")); r.code != 0 {
		t.Fatalf("pull after kill -9: %s", r.stderr)
	}
	for i, l := range m.Layers {
		want := 0
		if l.Digest == last {
			want = 1
		}
		if n := reg.BlobGets(l.Digest); n != want {
			t.Errorf("layer %d fetched %d times after the kill, want %d", i+1, n, want)
		}
	}
	if n := reg.BlobGets(m.Config.Digest); n != 0 {
		t.Errorf("config fetched %d times after the kill, want 0", n)
	}
	var views []struct{ Name, RepoDigest string }
	r := podlabConfig(t, cfg, "image", "ls", "-o", "json")
	json.Unmarshal([]byte(r.stdout), &views)
	if len(views) != 1 || views[0].Name != reg.Ref("k9/app:1") {
		t.Errorf("image ls -o json: %s", r.stdout)
	}
	if r := podlabConfig(t, cfg, "image", "rm", "-o", "json", reg.Ref("k9/app:1")); r.code != 0 || !strings.Contains(r.stdout, `"name": "`+reg.Ref("k9/app:1")) {
		t.Errorf("image rm -o json: %s %s", r.stdout, r.stderr)
	}
}

// `podlab run` of an image only a loopback mirror has, under its Docker Hub
// name, with imagePullPolicy IfNotPresent: pulled once (a stage of the
// trace), then used without asking the registry; Never with a missing
// image fails before any sandbox stage.
func TestRunPullsThroughMirror(t *testing.T) {
	rootSetup(t)
	reg := testregistry.Start(t)
	img := testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t),
		testregistry.Layer(t, testregistry.File{Path: "etc/greeting", Body: []byte("from the mirror\n")}))
	reg.Push(t, "team/greeter:1", img)
	cfg := mirrorConfig(t, reg.Host)
	pod := func(name, policy, image string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: %s
    imagePullPolicy: %s
    command: [cat, /etc/greeting]
`, name, image, policy)
	}
	run := func(name, policy, image string) result {
		t.Helper()
		f := filepath.Join(t.TempDir(), "pod.yaml")
		os.WriteFile(f, []byte(pod(name, policy, image)), 0o644)
		return podlabConfig(t, cfg, "run", "-f", f)
	}
	defer podlabConfig(t, cfg, "rm", "-f", "e2e-mirror1", "e2e-mirror2")

	r := run("e2e-mirror1", "IfNotPresent", "team/greeter:1")
	if r.code != 0 {
		t.Fatalf("podlab run: %s", r.stderr)
	}
	if !strings.Contains(r.stdout+r.stderr, "pull team/greeter:1") {
		t.Errorf("no pull stage in the trace:\n%s%s", r.stdout, r.stderr)
	}
	if len(reg.Requests("/blobs/")) == 0 {
		t.Errorf("the mirror served no blob")
	}
	waitLog(t, cfg, "e2e-mirror1", "from the mirror")
	if r := podlabConfig(t, cfg, "rm", "-f", "e2e-mirror1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	reg.Reset()
	if r := run("e2e-mirror2", "IfNotPresent", "docker.io/team/greeter:1"); r.code != 0 {
		t.Fatalf("second podlab run: %s", r.stderr)
	}
	if q := reg.Requests(""); len(q) != 0 {
		t.Errorf("IfNotPresent with the image present asked the registry: %v", q)
	}
	if r := podlabConfig(t, cfg, "rm", "-f", "e2e-mirror2"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r = run("e2e-never", "Never", "team/absent:1")
	r.failsNaming(t, "Never with a missing image", "ErrImageNeverPull")
	if strings.Contains(r.stdout+r.stderr, "RunPodSandbox") || len(reg.Requests("")) != 0 {
		t.Errorf("Never with a missing image reached a sandbox stage or the registry:\n%s%s", r.stdout, r.stderr)
	}
	noState(t)
}

// mirrorConfig is a config with an image store of its own whose docker.io
// is mirrored by the registry at host; docker.io's upstream is a closed
// port, so only the mirror can serve.
func mirrorConfig(t *testing.T, host string) string {
	t.Helper()
	return writeConfig(t, t.TempDir(), privateImageDir(t)+fmt.Sprintf(`registry:
  hosts:
    docker.io:
      server: http://127.0.0.1:%s
      endpoints:
      - url: http://%s
        capabilities: [pull, resolve]
`, freePort(t), host))
}

// waitLog waits until the pod's container log holds want.
func waitLog(t *testing.T, cfg, pod, want string) {
	t.Helper()
	var r result
	for i := 0; i < 100; i++ {
		r = podlabConfig(t, cfg, "logs", pod)
		if strings.Contains(r.stdout, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("logs of %s: %q %s, want %q", pod, r.stdout, r.stderr, want)
}
