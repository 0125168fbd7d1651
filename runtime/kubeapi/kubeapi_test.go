package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podlab/podlab/internal/otlp"
)

// cert is a certificate signed by parent (self-signed if nil), in PEM.
func cert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, server bool) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	switch {
	case parent == nil:
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	case server:
		tmpl.IPAddresses, tmpl.ExtKeyUsage = []net.IP{net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	default:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// An apiserver on 127.0.0.1 that asks for the client certificate kubeadm's
// admin.conf holds, and answers a pod and its events.
func TestClientReadsPodAndEvents(t *testing.T) {
	ca, caKey, caPEM, _ := cert(t, "kubernetes", nil, nil, false)
	_, _, srvPEM, srvKey := cert(t, "kube-apiserver", ca, caKey, true)
	_, _, cliPEM, cliKey := cert(t, "kubernetes-admin", ca, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srvPair, err := tls.X509KeyPair(srvPEM, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	ctrl := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: "Other", Name: "not-the-controller"}, {Kind: kind, Name: name, Controller: &yes}}
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", UID: "u-1", OwnerReferences: ctrl("ReplicaSet", "web-5d8")}}
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.CommonName+" "+r.URL.RequestURI())
		switch r.URL.Path {
		case "/api/v1/namespaces/default/pods/web-1":
			json.NewEncoder(w).Encode(pod)
		case "/apis/apps/v1/namespaces/default/replicasets/web-5d8":
			json.NewEncoder(w).Encode(metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8", OwnerReferences: ctrl("Deployment", "web")}})
		case "/api/v1/namespaces/default/events":
			json.NewEncoder(w).Encode(corev1.EventList{Items: []corev1.Event{{Reason: "Scheduled"}}})
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","message":"pods \"nope\" not found"}`)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	kubeconfig := filepath.Join(t.TempDir(), "admin.conf")
	os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://192.0.2.1:6443"}
- name: podlab
  cluster:
    server: %s
    certificate-authority-data: %s
contexts:
- name: kubernetes-admin@podlab
  context: {cluster: podlab, user: kubernetes-admin}
current-context: kubernetes-admin@podlab
users:
- name: kubernetes-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
`, srv.URL, b64(caPEM), b64(cliPEM), b64(cliKey))), 0o600)

	c, err := New(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.Pod(ctx, "default", "web-1")
	if err != nil || got.UID != "u-1" {
		t.Fatalf("Pod: %+v, %v", got, err)
	}
	evs, err := c.Events(ctx, got)
	if err != nil || len(evs) != 1 || evs[0].Reason != "Scheduled" {
		t.Fatalf("Events: %+v, %v", evs, err)
	}
	// The Deployment is gone: the chain ends with it.
	owners, err := c.Owners(ctx, got)
	if err != nil || fmt.Sprint(owners) != "[{replicasets web-5d8} {deployments web}]" {
		t.Errorf("Owners: %v, %v", owners, err)
	}
	if _, err := c.Pod(ctx, "default", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing pod: %v, want ErrNotFound", err)
	}
	want := "kubernetes-admin /api/v1/namespaces/default/pods/web-1\n" +
		"kubernetes-admin /api/v1/namespaces/default/events?fieldSelector=involvedObject.uid%3Du-1\n" +
		"kubernetes-admin /apis/apps/v1/namespaces/default/replicasets/web-5d8\n" +
		"kubernetes-admin /apis/apps/v1/namespaces/default/deployments/web\n" +
		"kubernetes-admin /api/v1/namespaces/default/pods/nope"
	if strings.Join(seen, "\n") != want {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), want)
	}

	// A kubeconfig whose current context is missing is an error naming it.
	os.WriteFile(kubeconfig, []byte("current-context: nope\n"), 0o600)
	if _, err := New(kubeconfig); err == nil || !strings.Contains(err.Error(), `current-context "nope"`) {
		t.Errorf("a missing context: %v", err)
	}
}

func TestMarks(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 53, 50, 0, time.UTC)
	sec := func(n int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(n) * time.Second)) }
	pod := &corev1.Pod{Status: corev1.PodStatus{
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: sec(0)},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: sec(3)},
			{Type: "NoTime", Status: corev1.ConditionFalse},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "httpd",
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: sec(2), FinishedAt: sec(30), ExitCode: 137, Reason: "Error"}},
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: sec(31)}}}},
	}}
	events := []corev1.Event{
		{Reason: "Scheduled", Message: "Successfully assigned default/web-1 to n1", ReportingController: "default-scheduler",
			EventTime: metav1.NewMicroTime(t0.Add(123456 * time.Microsecond))},
		{Reason: "Pulled", Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: sec(2), LastTimestamp: sec(2), Count: 1},
		{Reason: "Unhealthy", Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: sec(20), LastTimestamp: sec(30), Count: 3},
	}
	var got []string
	for _, m := range Marks(pod, events) {
		got = append(got, fmt.Sprintf("%s %s %q +%v %v", m.Source, m.Component, m.Name, m.Time.Sub(t0), m.Resolution))
	}
	want := []string{
		`condition pod "PodScheduled=True" +0s 1s`,
		`condition pod "Ready=True" +3s 1s`,
		`status pod "httpd started" +2s 1s`,
		`status pod "httpd exited 137 (Error)" +30s 1s`,
		`status pod "httpd running" +31s 1s`,
		`event default-scheduler "Scheduled" +123.456ms 1µs`,
		`event kubelet "Pulled" +2s 1s`,
		`event kubelet "Unhealthy (×3, last 00:54:20)" +20s 1s`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("marks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, m := range Marks(pod, events) {
		if m.Source != otlp.SourceCondition && m.Source != otlp.SourceStatus && m.Source != otlp.SourceEvent {
			t.Errorf("mark %q: source %q", m.Name, m.Source)
		}
	}
}
