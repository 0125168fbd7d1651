package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Quantities keep an internal cache; equal means same value, same form.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool {
	return a.Cmp(b) == 0 && a.String() == b.String()
})

// FuzzParse checks that Parse never panics, and that what it accepts it
// accepts again, unchanged, after a round trip through YAML: defaults are
// idempotent and nothing the parser produces fails its own validation.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.*")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(app("securityContext:\n  runAsNonRoot: true\n  runAsUser: 0\n", "")))
	f.Add([]byte(configMapDoc + secretDoc + app("envFrom:\n- configMapRef: {name: app-config}\n- secretRef: {name: creds}\n", "")))
	// Values whose text form a round trip may change.
	f.Add([]byte(tricky))

	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		again := marshal(t, m)
		m2, err := Parse(again)
		if err != nil {
			t.Fatalf("re-marshaled manifest does not parse: %v\n--- input:\n%s\n--- re-marshaled:\n%s", err, data, again)
		}
		if diff := cmp.Diff(m.Pod, m2.Pod, quantityEqual); diff != "" {
			t.Fatalf("Pod changed in a round trip (-first +second):\n%s\n--- re-marshaled:\n%s", diff, again)
		}
		if diff := cmp.Diff(m.ConfigMaps, m2.ConfigMaps); diff != "" {
			t.Fatalf("ConfigMaps changed in a round trip (-first +second):\n%s", diff)
		}
		if diff := cmp.Diff(m.Secrets, m2.Secrets); diff != "" {
			t.Fatalf("Secrets changed in a round trip (-first +second):\n%s", diff)
		}
	})
}

// marshal writes m back as a multi-document YAML manifest.
func marshal(t *testing.T, m *Manifest) []byte {
	t.Helper()
	var objs []any
	for _, name := range sortedKeys(m.ConfigMaps) {
		objs = append(objs, m.ConfigMaps[name])
	}
	for _, name := range sortedKeys(m.Secrets) {
		objs = append(objs, m.Secrets[name])
	}
	objs = append(objs, m.Pod)
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("marshal %T: %v", o, err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes()
}

const tricky = `apiVersion: v1
kind: Secret
metadata:
  name: s
  creationTimestamp: "2024-05-06T07:08:09.123456Z"
data:
  empty: ""
stringData:
  multi: "line1\nline2\n  trailing  "
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: c
data:
  yes: "yes"
  num: "0777"
  colon: "a: b"
  unicode: "\u00e9\u2028\U0001F600"
binaryData:
  bin: AAEC/w==
---
apiVersion: v1
kind: Pod
metadata:
  name: tricky
  annotations:
    "example.com/Key": " leading space"
    note: "~"
spec:
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo '---'; echo \"$(HOME)\""]
    env:
    - {name: A, value: "null"}
    - {name: B, value: "1e3"}
    - {name: "C.d-e", value: ""}
    resources:
      limits: {cpu: "1.5", memory: 1e9, ephemeral-storage: 0.5Gi, example.com/gpu: 1}
      requests: {cpu: 100m, memory: "1000000000"}
    readinessProbe:
      httpGet: {port: http, path: /}
    livenessProbe:
      tcpSocket: {port: 8080}
    ports:
    - {name: http, containerPort: 8080}
  volumes:
  - name: mem
    emptyDir: {medium: Memory, sizeLimit: 64Mi}
`
