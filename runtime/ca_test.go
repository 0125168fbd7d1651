package runtime

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
)

// writeTestPKI writes a CA and a server certificate for DNS name server,
// signed by it, as PEM files in dir.
func writeTestPKI(t *testing.T, dir, server string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podlab test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: server}, DNSNames: []string{server},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER)
}

// importProbeImage builds an image holding busybox and the static tlsprobe.
func importProbeImage(t *testing.T, rt *Runtime) {
	t.Helper()
	dir := t.TempDir()
	rootfsDir := filepath.Join(dir, "rootfs")
	if out, err := exec.Command("../scripts/busybox-rootfs.sh", rootfsDir).CombinedOutput(); err != nil {
		t.Fatalf("busybox rootfs: %v\n%s", err, out)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(rootfsDir, "usr/local/bin/tlsprobe"), "../test/tlsprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tlsprobe: %v\n%s", err, out)
	}
	store, err := rootfs.Open(rt.Config.ImageDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import("tlsprobe:test", rootfsDir); err != nil {
		t.Fatal(err)
	}
}

// A TLS server in one pod, a client in another: the client trusts the
// server only through the CA bundle podlab injects.
func TestCAInjectionTLS(t *testing.T) {
	pki := t.TempDir()
	caFile, certFile, keyFile := writeTestPKI(t, pki, "tls-server.test")
	rt := newTestRuntime(t, func(c *config.Config) {
		c.ImageDir = filepath.Join(t.TempDir(), "images")
		c.Injection.CA.ExtraFiles = []string{caFile}
	})
	importProbeImage(t, rt)

	server := runPod(t, rt, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: tls-server}
spec:
  volumes: [{name: pki, hostPath: {path: %s, type: Directory}}]
  containers:
  - name: server
    image: tlsprobe:test
    command: ["tlsprobe", "serve", "-cert", "/pki/server.pem", "-key", "/pki/server.key", "-addr", ":8443"]
    volumeMounts: [{name: pki, mountPath: /pki, readOnly: true}]
`, filepath.Dir(certFile)))
	_ = keyFile
	url := "https://" + server.IPs[0] + ":8443/"
	client := func(namespace string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: tls-client, namespace: %s}
spec:
  containers:
  - name: client
    image: tlsprobe:test
    command: ["tlsprobe", "get", "-servername", "tls-server.test", "%s"]
`, namespace, url)
	}

	injected := runPod(t, rt, client("default"))
	code, out := waitExit(t, rt, injected, "client")
	if code != 0 || !strings.Contains(out, "200 OK ok from tls-server") {
		t.Fatalf("client with the injected CA: exit %d\n%s", code, out)
	}

	// kube-system is excluded from the CA rule by default: no bundle, so
	// the same request fails on the certificate.
	excluded := runPod(t, rt, client("kube-system"))
	code, out = waitExit(t, rt, excluded, "client")
	if code == 0 || !strings.Contains(out, "x509") {
		t.Fatalf("client without the CA: exit %d\n%s", code, out)
	}

	// The injected bundle is read-only inside the container.
	if out, code := execIn(t, rt, server, "server", "sh", "-c", "echo junk >> /etc/ssl/certs/ca-certificates.crt"); code == 0 {
		t.Fatalf("wrote to the injected CA bundle: %s", out)
	}
}
