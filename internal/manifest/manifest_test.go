package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// pod wraps a spec (written flush left) into a Pod named "p".
func pod(spec string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n" + indent(spec)
}

// app is a spec with one container "app" whose extra fields (flush left) are
// given, followed by pod-level spec fields.
func app(containerExtra, specExtra string) string {
	return pod("containers:\n- name: app\n  image: busybox\n" + indentBy(containerExtra, "  ") + specExtra)
}

func indent(s string) string { return indentBy(s, "  ") }

func indentBy(s, by string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}

const configMapDoc = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  LEVEL: debug
---
`

const secretDoc = `apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  user: admin
---
`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error, all required
	}{
		// Syntax and document structure.
		{"not YAML", "apiVersion: v1\nkind: [Pod\n", []string{"document 0 (line 1): not valid YAML: yaml: line"}},
		{"binary", "\x00\x01\x02ELF", []string{"not valid YAML", "control characters are not allowed"}},
		{"bad JSON", `{"apiVersion": "v1", "kind": "Pod",`, []string{"not valid YAML"}},
		{"empty", "", []string{"empty manifest"}},
		{"only comments and markers", "# nothing\n---\n---\n", []string{"empty manifest"}},
		{"scalar document", "hello world\n", []string{"document 0 (line 1): not a Kubernetes object: got a string"}},
		{"list document", "- a\n- b\n", []string{"not a Kubernetes object: got a list"}},
		{"wrong kind", app("", "") + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n",
			[]string{`document 1 (line 10): kind "Deployment" is not supported (want v1 Pod, ConfigMap, Secret)`}},
		{"wrong apiVersion", strings.Replace(app("", ""), "apiVersion: v1", "apiVersion: apps/v1", 1),
			[]string{`document 0 (line 1): apiVersion "apps/v1" is not supported for kind "Pod" (want "v1")`}},
		{"missing apiVersion", strings.Replace(app("", ""), "apiVersion: v1\n", "", 1), []string{`apiVersion is required for kind "Pod"`}},
		{"missing kind", strings.Replace(app("", ""), "kind: Pod\n", "", 1), []string{"kind is required"}},
		{"lowercase kind", strings.Replace(app("", ""), "kind: Pod", "kind: pod", 1), []string{`kind "pod" is not supported`}},
		{"wrong apiVersion ConfigMap", "apiVersion: v2\nkind: ConfigMap\nmetadata:\n  name: c\n---\n" + app("", ""),
			[]string{`apiVersion "v2" is not supported for kind "ConfigMap"`}},
		{"two Pods", app("", "") + "---\n" + strings.Replace(app("", ""), "name: p", "name: q", 1),
			[]string{"2 Pods in manifest (document 0 (line 1), document 1 (line 10)): want exactly one v1 Pod"}},
		{"no Pod", strings.TrimSuffix(configMapDoc, "---\n"), []string{"no Pod in manifest"}},
		{"List with a Deployment", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n",
			[]string{`document 0 (line 1) items[0]: kind "Deployment" is not supported`}},
		{"empty List", "apiVersion: v1\nkind: List\nitems: []\n", []string{"no Pod in manifest"}},
		{"List with unknown field", "apiVersion: v1\nkind: List\nitemz: []\n", []string{"itemz: unknown field"}},
		{"duplicate ConfigMap", configMapDoc + configMapDoc + app("", ""), []string{`document 1 (line 8): ConfigMap "app-config" is already defined in document 0 (line 1)`}},

		// Strict decoding: unknown fields by full path, and types.
		{"unknown top-level field", app("", "") + "spex: {}\n", []string{"Pod \"p\": spex: unknown field"}},
		{"unknown container field", app("imagePullPolic: Always\n", ""), []string{"spec.containers[0].imagePullPolic: unknown field"}},
		{"unknown metadata field", strings.Replace(app("", ""), "  name: p\n", "  name: p\n  lables: {a: b}\n", 1), []string{"metadata.lables: unknown field"}},
		{"unknown deep field", app("env:\n- name: A\n  valueFrom:\n    fieldRef:\n      fieldpath: metadata.name\n", ""),
			[]string{"spec.containers[0].env[0].valueFrom.fieldRef.fieldpath: unknown field"}},
		{"unknown volume field", app("", "volumes:\n- name: v\n  configMap:\n    name: c\n    itemz: []\n"), []string{"spec.volumes[0].configMap.itemz: unknown field"}},
		{"field name case matters", strings.Replace(app("", ""), "  name: p\n", "  Name: p\n", 1), []string{"metadata.Name: unknown field"}},
		{"several unknown fields", app("imagePullPolic: Always\nport: 80\n", ""),
			[]string{"spec.containers[0].imagePullPolic: unknown field", "spec.containers[0].port: unknown field"}},
		{"duplicate key", strings.Replace(app("", ""), "  name: p\n", "  name: p\n  name: q\n", 1), []string{`key "name" already set in map`}},
		{"string for integer", app("ports:\n- containerPort: http\n", ""),
			[]string{`spec.containers[0].ports[0].containerPort: Invalid value: "http": must be an integer, not a string`}},
		{"number for string", app("env:\n- name: A\n  value: 1\n", ""), []string{"spec.containers[0].env[0].value: Invalid value: 1: must be a string (quote it), not a number"}},
		{"object for list", app("command: {a: b}\n", ""), []string{`spec.containers[0].command: Invalid value: "{...}": must be a list, not a mapping`}},
		{"int32 overflow", app("ports:\n- containerPort: 4294967296\n", ""), []string{"containerPort: Invalid value: 4294967296: must be a whole number that fits in 32 bits"}},
		{"DEL in a string", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox", "command": ["a\u007f"]}]}}`,
			[]string{`spec.containers[0].command[0]: Invalid value: "a\x7f": must not contain U+007F: YAML cannot carry it`}},
		{"NEL in a label key", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {\"a\\Nb\": c}\n",
			[]string{`metadata.labels[a`, `Invalid value: "a\u0085b": must not contain U+0085`}},
		{"timestamp past year 9999 in UTC", strings.Replace(app("", ""), "  name: p\n", "  name: p\n  creationTimestamp: \"9999-12-31T23:59:59-01:00\"\n", 1),
			[]string{`metadata.creationTimestamp: Invalid value: "9999-12-31T23:59:59-01:00": must be between years 0000 and 9999 in UTC`}},
		{"bad quantity", app("resources:\n  limits:\n    cpu: lots\n", ""), []string{`spec.containers[0].resources.limits[cpu]: Invalid value: "lots": quantities must match`}},
		{"bad base64 in Secret", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata:\n  k: '%%%'\n---\n" + app("", ""),
			[]string{`Secret "s": data[k]: Invalid value: illegal base64 data at input byte 0`}},
		{"Secret values are not echoed", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  k: 123456\n---\n" + app("", ""),
			[]string{`Secret "s": stringData[k]: Invalid value: must be a string (quote it), not a number`}},

		// Metadata.
		{"missing name", strings.Replace(app("", ""), "  name: p\n", "  labels: {a: b}\n", 1), []string{"metadata.name: Required value"}},
		{"name with slash", strings.Replace(app("", ""), "name: p", "name: a/b", 1),
			[]string{`metadata.name: Invalid value: "a/b": a lowercase RFC 1123 subdomain must consist of`}},
		{"name with dots", strings.Replace(app("", ""), "name: p", "name: a..b", 1), []string{`metadata.name: Invalid value: "a..b": a lowercase RFC 1123 subdomain`}},
		{"upper case name", strings.Replace(app("", ""), "name: p", "name: Web", 1), []string{`metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain`}},
		{"name too long for a hostname", strings.Replace(app("", ""), "name: p", "name: "+strings.Repeat("a", 64), 1),
			[]string{"metadata.name: Invalid value: \"" + strings.Repeat("a", 64) + "\": must be no more than 63 characters"}},
		{"bad namespace", strings.Replace(app("", ""), "  name: p\n", "  name: p\n  namespace: kube.system\n", 1),
			[]string{`metadata.namespace: Invalid value: "kube.system": must not contain dots`}},
		{"bad label", strings.Replace(app("", ""), "  name: p\n", "  name: p\n  labels: {\"a b\": c}\n", 1), []string{`metadata.labels: Invalid value: "a b"`}},

		// Containers.
		{"no containers", pod("containers: []\n"), []string{"spec.containers: Required value: must have at least one container"}},
		{"duplicate container names", pod("containers:\n- name: x\n  image: a\n- name: x\n  image: b\n"), []string{`spec.containers[1].name: Duplicate value: "x"`}},
		{"duplicate init and app container", pod("initContainers:\n- name: x\n  image: a\ncontainers:\n- name: x\n  image: b\n"),
			[]string{`spec.containers[0].name: Duplicate value: "x"`}},
		{"bad container name", pod("containers:\n- name: My_App\n  image: a\n"), []string{`spec.containers[0].name: Invalid value: "My_App"`}},
		{"missing container name", pod("containers:\n- image: a\n"), []string{"spec.containers[0].name: Required value"}},
		{"missing image", pod("containers:\n- name: app\n"), []string{"spec.containers[0].image: Required value"}},
		{"bad imagePullPolicy", app("imagePullPolicy: Sometimes\n", ""), []string{`spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes"`}},
		{"bad port", app("ports:\n- containerPort: 70000\n", ""),
			[]string{"spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"}},
		{"zero port", app("ports:\n- name: http\n", ""), []string{"spec.containers[0].ports[0].containerPort: Invalid value: 0"}},
		{"bad protocol", app("ports:\n- containerPort: 80\n  protocol: ICMP\n", ""), []string{`ports[0].protocol: Unsupported value: "ICMP"`}},
		{"duplicate port name", app("ports:\n- {name: http, containerPort: 80}\n- {name: http, containerPort: 81}\n", ""), []string{`ports[1].name: Duplicate value: "http"`}},
		{"negative runAsUser", app("securityContext:\n  runAsUser: -1\n", ""),
			[]string{"spec.containers[0].securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive"}},
		{"negative pod fsGroup", app("", "securityContext:\n  fsGroup: -5\n"), []string{"spec.securityContext.fsGroup: Invalid value: -5"}},
		{"runAsNonRoot with runAsUser 0", app("securityContext:\n  runAsNonRoot: true\n  runAsUser: 0\n", ""),
			[]string{"spec.containers[0].securityContext.runAsUser: Invalid value: 0: must not be 0 when runAsNonRoot is true"}},
		{"pod runAsNonRoot with pod runAsUser 0", app("", "securityContext:\n  runAsNonRoot: true\n  runAsUser: 0\n"),
			[]string{"spec.securityContext.runAsUser: Invalid value: 0: must not be 0 when runAsNonRoot is true"}},
		{"seccomp without type", app("securityContext:\n  seccompProfile: {}\n", ""), []string{"spec.containers[0].securityContext.seccompProfile.type: Required value"}},
		{"seccomp bad type", app("", "securityContext:\n  seccompProfile: {type: Strict}\n"), []string{`spec.securityContext.seccompProfile.type: Unsupported value: "Strict"`}},
		{"seccomp Localhost without file", app("securityContext:\n  seccompProfile: {type: Localhost}\n", ""),
			[]string{"spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost"}},
		{"seccomp Localhost climbing out", app("securityContext:\n  seccompProfile: {type: Localhost, localhostProfile: ../etc/p.json}\n", ""),
			[]string{"spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: \"../etc/p.json\": must not contain '..'"}},
		{"seccomp Localhost absolute", app("", "securityContext:\n  seccompProfile: {type: Localhost, localhostProfile: /etc/p.json}\n"),
			[]string{"spec.securityContext.seccompProfile.localhostProfile: Invalid value: \"/etc/p.json\": must be a relative path"}},
		{"seccomp file without Localhost", app("securityContext:\n  seccompProfile: {type: RuntimeDefault, localhostProfile: p.json}\n", ""),
			[]string{"spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: \"p.json\": can only be set when seccomp type is Localhost"}},
		{"apparmor without type", app("securityContext:\n  appArmorProfile: {}\n", ""), []string{"spec.containers[0].securityContext.appArmorProfile.type: Required value"}},
		{"apparmor bad type", app("", "securityContext:\n  appArmorProfile: {type: Complain}\n"), []string{`spec.securityContext.appArmorProfile.type: Unsupported value: "Complain"`}},
		{"apparmor Localhost without profile", app("securityContext:\n  appArmorProfile: {type: Localhost}\n", ""),
			[]string{"spec.containers[0].securityContext.appArmorProfile.localhostProfile: Required value: must be set when AppArmor type is Localhost"}},
		{"apparmor profile without Localhost", app("", "securityContext:\n  appArmorProfile: {type: Unconfined, localhostProfile: p}\n"),
			[]string{"spec.securityContext.appArmorProfile.localhostProfile: Invalid value: \"p\": can only be set when AppArmor type is Localhost"}},
		{"privileged without escalation", app("securityContext:\n  privileged: true\n  allowPrivilegeEscalation: false\n", ""),
			[]string{"cannot set `allowPrivilegeEscalation` to false and `privileged` to true"}},
		{"requests above limits", app("resources:\n  limits: {memory: 64Mi}\n  requests: {memory: 128Mi}\n", ""),
			[]string{"spec.containers[0].resources.requests[memory]: Invalid value: \"128Mi\": must be less than or equal to memory limit of 64Mi"}},
		{"negative quantity", app("resources:\n  limits: {cpu: \"-1\"}\n", ""), []string{"resources.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"}},
		{"bad restartPolicy", app("", "restartPolicy: Sometimes\n"), []string{`spec.restartPolicy: Unsupported value: "Sometimes"`}},
		{"shareProcessNamespace with hostPID", app("", "shareProcessNamespace: true\nhostPID: true\n"), []string{"ShareProcessNamespace and HostPID cannot both be enabled"}},
		{"bad hostname", app("", "hostname: web_0\n"), []string{`spec.hostname: Invalid value: "web_0"`}},
		{"hostUsers false with host namespaces", app("", "hostUsers: false\nhostNetwork: true\nhostPID: true\nhostIPC: true\n"),
			[]string{"spec.hostNetwork: Forbidden: when `hostUsers` is false", "spec.hostPID: Forbidden", "spec.hostIPC: Forbidden"}},

		// Environment.
		{"env name with =", app("env:\n- name: A=B\n  value: x\n", ""), []string{`spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='`}},
		{"env name with NUL", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox", "env": [{"name": "A\u0000B", "value": "x"}]}]}}`,
			[]string{`spec.containers[0].env[0].name: Invalid value: "A\x00B"`}},
		{"env name empty", app("env:\n- value: x\n", ""), []string{"spec.containers[0].env[0].name: Required value"}},
		{"env value and valueFrom", app("env:\n- name: A\n  value: x\n  valueFrom:\n    fieldRef: {fieldPath: metadata.name}\n", ""),
			[]string{"spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"}},
		{"valueFrom with two sources", app("env:\n- name: A\n  valueFrom:\n    fieldRef: {fieldPath: metadata.name}\n    resourceFieldRef: {resource: limits.cpu}\n", ""),
			[]string{"spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not have more than one field specified at a time"}},
		{"valueFrom empty", app("env:\n- name: A\n  valueFrom: {}\n", ""), []string{"valueFrom: Invalid value: \"\": must specify one of: `fieldRef`"}},
		{"bad fieldPath", app("env:\n- name: A\n  valueFrom:\n    fieldRef: {fieldPath: spec.containers}\n", ""),
			[]string{`spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.containers"`}},
		{"labels without subscript in env", app("env:\n- name: A\n  valueFrom:\n    fieldRef: {fieldPath: metadata.labels}\n", ""),
			[]string{`fieldRef.fieldPath: Unsupported value: "metadata.labels"`}},
		{"bad fieldRef apiVersion", app("env:\n- name: A\n  valueFrom:\n    fieldRef: {apiVersion: v2, fieldPath: metadata.name}\n", ""),
			[]string{`fieldRef.apiVersion: Unsupported value: "v2"`}},
		{"bad label subscript", app("env:\n- name: A\n  valueFrom:\n    fieldRef: {fieldPath: \"metadata.labels['a b']\"}\n", ""),
			[]string{`fieldRef.fieldPath: Invalid value: "metadata.labels['a b']"`}},
		{"bad resourceFieldRef", app("env:\n- name: A\n  valueFrom:\n    resourceFieldRef: {resource: limits.gpu}\n", ""),
			[]string{`resourceFieldRef.resource: Unsupported value: "limits.gpu"`}},
		{"resourceFieldRef to unknown container", app("env:\n- name: A\n  valueFrom:\n    resourceFieldRef: {containerName: web, resource: limits.cpu}\n", ""),
			[]string{`resourceFieldRef.containerName: Not found: "web"`}},
		{"bad cpu divisor", app("env:\n- name: A\n  valueFrom:\n    resourceFieldRef: {resource: limits.cpu, divisor: 1Mi}\n", ""),
			[]string{"resourceFieldRef.divisor: Invalid value: \"1Mi\": only divisor's values 1m and 1 are supported with the cpu resource"}},
		{"missing configmap", app("env:\n- {name: A, value: a}\n- {name: B, value: b}\n- name: C\n  valueFrom:\n    configMapKeyRef: {name: app-config, key: LEVEL}\n", ""),
			[]string{`spec.containers[0].env[2].valueFrom.configMapKeyRef.name: Not found: "app-config"`}},
		{"missing configmap key", configMapDoc + app("env:\n- name: C\n  valueFrom:\n    configMapKeyRef: {name: app-config, key: nope}\n", ""),
			[]string{`spec.containers[0].env[0].valueFrom.configMapKeyRef.key: Not found: "nope": no such key in ConfigMap "app-config"`}},
		{"missing secret key", secretDoc + app("env:\n- name: C\n  valueFrom:\n    secretKeyRef: {name: creds, key: password}\n", ""),
			[]string{`spec.containers[0].env[0].valueFrom.secretKeyRef.key: Not found: "password"`}},
		{"configMapKeyRef without key", configMapDoc + app("env:\n- name: C\n  valueFrom:\n    configMapKeyRef: {name: app-config}\n", ""),
			[]string{"configMapKeyRef.key: Required value"}},
		{"configMapKeyRef bad key", configMapDoc + app("env:\n- name: C\n  valueFrom:\n    configMapKeyRef: {name: app-config, key: \"a/b\"}\n", ""),
			[]string{`configMapKeyRef.key: Invalid value: "a/b": a valid config key must consist of`}},
		{"fileKeyRef", app("env:\n- name: C\n  valueFrom:\n    fileKeyRef: {volumeName: v, path: p, key: k}\n", ""),
			[]string{"spec.containers[0].env[0].valueFrom.fileKeyRef: Forbidden: not supported by podlab"}},
		{"missing secret in envFrom", app("envFrom:\n- secretRef: {name: creds}\n", ""), []string{`spec.containers[0].envFrom[0].secretRef.name: Not found: "creds"`}},
		{"envFrom with both refs", configMapDoc + secretDoc + app("envFrom:\n- secretRef: {name: creds}\n  configMapRef: {name: app-config}\n", ""),
			[]string{"spec.containers[0].envFrom[0]: Invalid value: \"\": may not have more than one field specified at a time"}},
		{"envFrom bad prefix", configMapDoc + app("envFrom:\n- configMapRef: {name: app-config}\n  prefix: \"A=\"\n", ""),
			[]string{`spec.containers[0].envFrom[0].prefix: Invalid value: "A="`}},

		// Volumes.
		{"hostPath relative", app("", "volumes:\n- name: v\n  hostPath: {path: data}\n"), []string{`spec.volumes[0].hostPath.path: Invalid value: "data": must be an absolute path`}},
		{"hostPath with ..", app("", "volumes:\n- name: v\n  hostPath: {path: /var/../etc}\n"), []string{`spec.volumes[0].hostPath.path: Invalid value: "/var/../etc": must not contain '..'`}},
		{"hostPath type", app("", "volumes:\n- name: v\n  hostPath: {path: /data, type: Dir}\n"), []string{`spec.volumes[0].hostPath.type: Unsupported value: "Dir": supported values:`}},
		{"duplicate volume names", app("", "volumes:\n- name: v\n  emptyDir: {}\n- name: v\n  emptyDir: {}\n"), []string{`spec.volumes[1].name: Duplicate value: "v"`}},
		{"bad volume name", app("", "volumes:\n- name: Data\n"), []string{`spec.volumes[0].name: Invalid value: "Data"`}},
		{"volume with two sources", app("", "volumes:\n- name: v\n  emptyDir: {}\n  hostPath: {path: /x}\n"),
			[]string{"spec.volumes[0]: Forbidden: may not specify more than 1 volume type (found hostPath, emptyDir)"}},
		{"nfs volume", app("", "volumes:\n- name: v\n  nfs: {server: nas, path: /export}\n"), []string{`spec.volumes[0]: Unsupported value: "nfs": supported values: "configMap"`}},
		{"pvc volume", app("", "volumes:\n- name: v\n  persistentVolumeClaim: {claimName: c}\n"), []string{`spec.volumes[0]: Unsupported value: "persistentVolumeClaim"`}},
		{"emptyDir medium", app("", "volumes:\n- name: v\n  emptyDir: {medium: HugePages}\n"), []string{`spec.volumes[0].emptyDir.medium: Unsupported value: "HugePages"`}},
		{"image volume without reference", app("", "volumes:\n- name: v\n  image: {pullPolicy: Never}\n"), []string{"spec.volumes[0].image.reference: Required value"}},
		{"image volume pullPolicy", app("", "volumes:\n- name: v\n  image: {reference: busybox, pullPolicy: Sometimes}\n"),
			[]string{`spec.volumes[0].image.pullPolicy: Unsupported value: "Sometimes"`}},
		{"missing configmap volume", app("", "volumes:\n- name: v\n  configMap: {name: app-config}\n"),
			[]string{`spec.volumes[0].configMap.name: Not found: "app-config": no ConfigMap of that name in the manifest`}},
		{"configMap item path absolute", configMapDoc + app("", "volumes:\n- name: v\n  configMap:\n    name: app-config\n    items: [{key: LEVEL, path: /etc/level}]\n"),
			[]string{`spec.volumes[0].configMap.items[0].path: Invalid value: "/etc/level": must be a relative path`}},
		{"configMap item path with ..", configMapDoc + app("", "volumes:\n- name: v\n  configMap:\n    name: app-config\n    items: [{key: LEVEL, path: a/../../level}]\n"),
			[]string{`spec.volumes[0].configMap.items[0].path: Invalid value: "a/../../level": must not contain '..'`}},
		{"configMap item missing key", configMapDoc + app("", "volumes:\n- name: v\n  configMap:\n    name: app-config\n    items: [{key: MISSING, path: m}]\n"),
			[]string{`spec.volumes[0].configMap.items[0].key: Not found: "MISSING"`}},
		{"secret item path with ..", secretDoc + app("", "volumes:\n- name: v\n  secret:\n    secretName: creds\n    items: [{key: user, path: ../user}]\n"),
			[]string{`spec.volumes[0].secret.items[0].path: Invalid value: "../user": must not contain '..'`}},
		{"secret volume without name", app("", "volumes:\n- name: v\n  secret: {}\n"), []string{"spec.volumes[0].secret.secretName: Required value"}},
		{"defaultMode out of range", configMapDoc + app("", "volumes:\n- name: v\n  configMap: {name: app-config, defaultMode: 01000}\n"),
			[]string{"spec.volumes[0].configMap.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive"}},
		{"item mode negative", secretDoc + app("", "volumes:\n- name: v\n  secret:\n    secretName: creds\n    items: [{key: user, path: u, mode: -1}]\n"),
			[]string{"spec.volumes[0].secret.items[0].mode: Invalid value: -1"}},
		{"downwardAPI path with ..", app("", "volumes:\n- name: v\n  downwardAPI:\n    items: [{path: ../name, fieldRef: {fieldPath: metadata.name}}]\n"),
			[]string{`spec.volumes[0].downwardAPI.items[0].path: Invalid value: "../name": must not contain '..'`}},
		{"downwardAPI path starting with ..", app("", "volumes:\n- name: v\n  downwardAPI:\n    items: [{path: ..data, fieldRef: {fieldPath: metadata.name}}]\n"),
			[]string{`downwardAPI.items[0].path: Invalid value: "..data": must not start with '..'`}},
		{"downwardAPI bad fieldPath", app("", "volumes:\n- name: v\n  downwardAPI:\n    items: [{path: ip, fieldRef: {fieldPath: status.podIP}}]\n"),
			[]string{`spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: "status.podIP"`}},
		{"downwardAPI resourceFieldRef without container", app("", "volumes:\n- name: v\n  downwardAPI:\n    items: [{path: cpu, resourceFieldRef: {resource: limits.cpu}}]\n"),
			[]string{"spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: Required value"}},
		{"downwardAPI item without source", app("", "volumes:\n- name: v\n  downwardAPI:\n    items: [{path: x}]\n"),
			[]string{"spec.volumes[0].downwardAPI.items[0]: Required value: one of fieldRef and resourceFieldRef is required"}},
		{"projected unsupported source", app("", "volumes:\n- name: v\n  projected:\n    sources:\n    - serviceAccountToken: {path: token}\n"),
			[]string{`spec.volumes[0].projected.sources[0]: Unsupported value: "serviceAccountToken"`}},
		{"projected conflicting paths", configMapDoc + app("", "volumes:\n- name: v\n  projected:\n    sources:\n    - configMap: {name: app-config, items: [{key: LEVEL, path: x}]}\n    - downwardAPI: {items: [{path: x, fieldRef: {fieldPath: metadata.name}}]}\n"),
			[]string{`spec.volumes[0].projected.sources[1].downwardAPI.items[0].path: Invalid value: "x": conflicting duplicate paths`}},
		{"projected missing secret", app("", "volumes:\n- name: v\n  projected:\n    sources:\n    - secret: {name: creds}\n"),
			[]string{`spec.volumes[0].projected.sources[0].secret.name: Not found: "creds"`}},

		// Volume mounts.
		{"mount of unknown volume", app("volumeMounts:\n- {name: data, mountPath: /data}\n", ""), []string{`spec.containers[0].volumeMounts[0].name: Not found: "data"`}},
		{"mountPath relative", app("volumeMounts:\n- {name: v, mountPath: data}\n", "volumes:\n- name: v\n"),
			[]string{`spec.containers[0].volumeMounts[0].mountPath: Invalid value: "data": must be an absolute path`}},
		{"mountPath with ..", app("volumeMounts:\n- {name: v, mountPath: /data/../etc}\n", "volumes:\n- name: v\n"),
			[]string{`spec.containers[0].volumeMounts[0].mountPath: Invalid value: "/data/../etc": must not contain '..'`}},
		{"mountPath missing", app("volumeMounts:\n- {name: v}\n", "volumes:\n- name: v\n"), []string{"spec.containers[0].volumeMounts[0].mountPath: Required value"}},
		{"duplicate mountPath", app("volumeMounts:\n- {name: v, mountPath: /data}\n- {name: w, mountPath: /data/}\n", "volumes:\n- name: v\n- name: w\n"),
			[]string{`spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/data/": must be unique`}},
		{"subPath absolute", app("volumeMounts:\n- {name: v, mountPath: /data, subPath: /x}\n", "volumes:\n- name: v\n"),
			[]string{`spec.containers[0].volumeMounts[0].subPath: Invalid value: "/x": must be a relative path`}},
		{"subPath with ..", app("volumeMounts:\n- {name: v, mountPath: /data, subPath: a/../../b}\n", "volumes:\n- name: v\n"),
			[]string{`spec.containers[0].volumeMounts[0].subPath: Invalid value: "a/../../b": must not contain '..'`}},
		{"subPath with backslash ..", app("volumeMounts:\n- {name: v, mountPath: /data, subPath: 'a\\..\\b'}\n", "volumes:\n- name: v\n"),
			[]string{`subPath: Invalid value: "a\\..\\b": must not contain '..'`}},
		{"bad mountPropagation", app("volumeMounts:\n- {name: v, mountPath: /data, mountPropagation: Shared}\n", "volumes:\n- name: v\n"),
			[]string{`volumeMounts[0].mountPropagation: Unsupported value: "Shared"`}},

		// ConfigMap and Secret objects.
		{"bad ConfigMap key", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  \"bad key\": x\n---\n" + app("", ""),
			[]string{`document 0 (line 1): ConfigMap "c" is invalid: data[bad key]: Invalid value: "bad key"`}},
		{"ConfigMap in another namespace", strings.Replace(configMapDoc, "  name: app-config\n", "  name: app-config\n  namespace: other\n", 1) + app("", ""),
			[]string{`metadata.namespace: Invalid value: "other": must be the Pod's namespace "default"`}},
		{"Secret without name", "apiVersion: v1\nkind: Secret\nmetadata: {}\n---\n" + app("", ""), []string{"Secret \"\"", "metadata.name: Required value"}},

		// Every problem is reported, not just the first.
		{"aggregated", pod("containers:\n- name: A\n- name: b\n  image: x\n  ports: [{containerPort: 0}]\n"),
			[]string{`Pod "p" is invalid: [`, `spec.containers[0].name: Invalid value: "A"`, "spec.containers[0].image: Required value", "spec.containers[1].ports[0].containerPort: Invalid value: 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse succeeded (warnings %q), want error containing %q", m.Warnings, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
				}
			}
		})
	}
	if len(tests) < 45 {
		t.Errorf("only %d bad manifests", len(tests))
	}
}

// TestErrorsAreAggregates lets callers list problems one per line.
func TestErrorsAreAggregates(t *testing.T) {
	_, err := Parse([]byte(pod("containers:\n- name: A\n")))
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		t.Fatalf("error %v (%T) does not wrap a utilerrors.Aggregate", err, err)
	}
	var inner utilerrors.Aggregate
	if !errors.As(agg.Errors()[0], &inner) || len(inner.Errors()) != 2 {
		t.Fatalf("want the Pod's two field errors inside, got %v", agg)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func mustParseFile(t *testing.T, name string) *Manifest {
	t.Helper()
	m, err := ParseFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("ParseFile(%s): %v", name, err)
	}
	return m
}

func TestGoodManifests(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/pod.json")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m := mustParseFile(t, filepath.Base(f))
			p := m.Pod
			if p.Namespace != "default" {
				t.Errorf("namespace = %q, want default", p.Namespace)
			}
			if !uuidRE.MatchString(string(p.UID)) {
				t.Errorf("uid %q is not a v4 UUID", p.UID)
			}
			if p.Spec.TerminationGracePeriodSeconds == nil || p.Spec.DNSPolicy != corev1.DNSClusterFirst || p.Spec.RestartPolicy == "" {
				t.Errorf("pod defaults missing: %+v", p.Spec)
			}
			for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
				if c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
					t.Errorf("container %s: termination message defaults missing", c.Name)
				}
				if c.ImagePullPolicy != DefaultPullPolicy(c.Image) {
					t.Errorf("container %s: imagePullPolicy = %q", c.Name, c.ImagePullPolicy)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	m := mustParseFile(t, "two-containers.yaml")
	s := m.Pod.Spec
	if s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("explicit restartPolicy overwritten: %q", s.RestartPolicy)
	}
	if *s.TerminationGracePeriodSeconds != 30 {
		t.Errorf("terminationGracePeriodSeconds = %d", *s.TerminationGracePeriodSeconds)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings %q, want none", m.Warnings)
	}

	m = mustParseFile(t, "init-containers.yaml")
	if m.Pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy = %q, want Always", m.Pod.Spec.RestartPolicy)
	}
	if got := len(m.Pod.Spec.InitContainers); got != 2 {
		t.Errorf("%d init containers", got)
	}

	m = mustParseFile(t, "volumes.yaml")
	s = m.Pod.Spec
	if *s.TerminationGracePeriodSeconds != 5 {
		t.Errorf("explicit terminationGracePeriodSeconds overwritten")
	}
	byName := map[string]corev1.Volume{}
	for _, v := range s.Volumes {
		byName[v.Name] = v
	}
	if got := *byName["config"].ConfigMap.DefaultMode; got != 0440 {
		t.Errorf("explicit configMap defaultMode = %o", got)
	}
	if got := *byName["tls"].Secret.DefaultMode; got != 0644 {
		t.Errorf("secret defaultMode = %o, want 644", got)
	}
	if got := *byName["tls"].Secret.Items[1].Mode; got != 0400 {
		t.Errorf("item mode = %o", got)
	}
	if byName["scratch"].EmptyDir == nil {
		t.Errorf("source-less volume not defaulted to emptyDir: %+v", byName["scratch"])
	}
	if got := *byName["logs"].HostPath.Type; got != corev1.HostPathDirectoryOrCreate {
		t.Errorf("hostPath type = %q", got)
	}
	ports := s.Containers[0].Ports
	if ports[0].Protocol != corev1.ProtocolTCP || ports[1].Protocol != corev1.ProtocolUDP {
		t.Errorf("port protocols = %q, %q", ports[0].Protocol, ports[1].Protocol)
	}
	if got := string(m.ConfigMaps["web-config"].BinaryData["logo.png"]); got != "\x89PNG\r\n\x1a\n" {
		t.Errorf("binaryData = %q", got)
	}
	if m.ConfigMaps["web-config"].Namespace != "default" {
		t.Errorf("ConfigMap namespace not defaulted")
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings %q, want none", m.Warnings)
	}

	m = mustParseFile(t, "projected.yaml")
	pr := m.Pod.Spec.Volumes[0].Projected
	if *pr.DefaultMode != 0644 || pr.Sources[1].DownwardAPI.Items[0].FieldRef.APIVersion != "v1" {
		t.Errorf("projected defaults missing: %+v", pr)
	}
	// A limit without a request requests the limit.
	if got := m.Pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("cpu request = %s, want the limit 500m", got.String())
	}

	m = mustParseFile(t, "downward-api-volume.yaml")
	if got := *m.Pod.Spec.Volumes[0].DownwardAPI.DefaultMode; got != 0644 {
		t.Errorf("downwardAPI defaultMode = %o", got)
	}

	m = mustParseFile(t, "env-downward-api.yaml")
	env := m.Pod.Spec.Containers[0].Env
	if env[0].ValueFrom.FieldRef.APIVersion != "v1" {
		t.Errorf("fieldRef apiVersion not defaulted")
	}
	if env[len(env)-1].Value != "Hello $(MY_POD_NAME)" {
		t.Errorf("$(VAR) reference changed at parse time: %q", env[len(env)-1].Value)
	}

	// The uid is generated once per parse, and kept when given.
	a, b := mustParseFile(t, "pod.json"), mustParseFile(t, "pod.json")
	if a.Pod.UID == b.Pod.UID {
		t.Errorf("two parses share uid %s", a.Pod.UID)
	}
	m, err := Parse([]byte(strings.Replace(app("", ""), "  name: p\n", "  name: p\n  uid: 1234\n", 1)))
	if err == nil {
		t.Errorf("numeric uid accepted: %v", m.Pod.UID)
	}
	m, err = Parse([]byte(strings.Replace(app("", ""), "  name: p\n", "  name: p\n  uid: \"1234\"\n", 1)))
	if err != nil || m.Pod.UID != "1234" {
		t.Errorf("explicit uid: %v, %v", err, m)
	}
}

func TestSecretsAndConfigMaps(t *testing.T) {
	m := mustParseFile(t, "env-from.yaml")
	s := m.Secrets["test-secret"]
	want := map[string][]byte{"username": []byte("my-app"), "password": []byte("39528$vdg7Jb")}
	if diff := cmp.Diff(want, s.Data); diff != "" {
		t.Errorf("secret data (-want +got):\n%s", diff)
	}
	if s.StringData != nil {
		t.Errorf("stringData kept: %v", s.StringData)
	}
	if got := m.ConfigMaps["special-config"].Data["SPECIAL_TYPE"]; got != "charm" {
		t.Errorf("configmap data = %q", got)
	}
	if got := m.Pod.Spec.Containers[0].EnvFrom[0].Prefix; got != "CONFIG_" {
		t.Errorf("prefix = %q", got)
	}

	// stringData wins over data, as on the API server.
	in := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata:\n  k: b2xk\nstringData:\n  k: new\n---\n" + app("", "")
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(m.Secrets["s"].Data["k"]); got != "new" {
		t.Errorf("merged value = %q, want new", got)
	}
	if m.Secrets["s"].Type != corev1.SecretTypeOpaque {
		t.Errorf("secret type = %q", m.Secrets["s"].Type)
	}

	m = mustParseFile(t, "list.yaml")
	if m.Pod.Name != "listed" || m.ConfigMaps["cfg"] == nil {
		t.Errorf("List not expanded: pod %q, configmaps %v", m.Pod.Name, m.ConfigMaps)
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		file string
		in   string
		want []string
	}{
		{file: "unsupported.yaml", want: []string{
			"spec.containers[0].livenessProbe: not supported by podlab, ignored",
			"spec.affinity: not supported by podlab, ignored",
		}},
		{file: "share-process-namespace.yaml", want: []string{
			"spec.containers[1].stdin: not supported by podlab, ignored",
			"spec.containers[1].tty: not supported by podlab, ignored",
		}},
		{in: app(`imagePullPolicy: Always
ports:
- containerPort: 80
  hostPort: 8080
  hostIP: 127.0.0.1
securityContext:
  runAsUser: 1000
  seccompProfile: {type: RuntimeDefault}
volumeMounts:
- name: v
  mountPath: /v
  mountPropagation: HostToContainer
lifecycle:
  preStop:
    exec: {command: [sleep, "1"]}
`, `volumes:
- name: v
tolerations:
- {key: k, operator: Exists}
nodeSelector: {disk: ssd}
dnsPolicy: Default
schedulerName: default-scheduler
enableServiceLinks: true
activeDeadlineSeconds: 60
securityContext:
  sysctls: [{name: net.core.somaxconn, value: "1024"}]
`) + "status:\n  phase: Running\n", want: []string{
			"spec.containers[0].volumeMounts[0].mountPropagation: not supported by podlab, ignored",
			"spec.containers[0].lifecycle: not supported by podlab, ignored",
			"spec.activeDeadlineSeconds: not supported by podlab, ignored",
			`spec.dnsPolicy: "Default" is not supported by podlab, ignored`,
			"spec.nodeSelector: not supported by podlab, ignored",
			"spec.tolerations: not supported by podlab, ignored",
			"status: status is ignored",
		}},
	}
	for _, tt := range tests {
		name := tt.file
		if name == "" {
			name = "inline"
		}
		t.Run(name, func(t *testing.T) {
			var m *Manifest
			if tt.file != "" {
				m = mustParseFile(t, tt.file)
			} else {
				var err error
				if m, err = Parse([]byte(tt.in)); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tt.want, m.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(pod("containers: []\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("ParseFile(bad) = %v, want an error starting with the file name", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := ParseFile(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ParseFile(missing) = %v", err)
	}

	// "-" reads stdin.
	f, err := os.Open(filepath.Join("testdata", "pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdin := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = stdin }()
	m, err := ParseFile("-")
	if err != nil || m.Pod.Name != "json-pod" {
		t.Errorf("ParseFile(-) = %v, %v", m, err)
	}
}

// TestSplitting covers document markers podlab must not miss or invent.
func TestSplitting(t *testing.T) {
	in := "\xef\xbb\xbf---\r\n" + configMapDoc + "--- # comment after the marker\n" + strings.ReplaceAll(app("command: [sh, -c, \"echo ---\"]\n", ""), "\n", "\r\n") + "...\n"
	m, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ConfigMaps) != 1 || m.Pod.Spec.Containers[0].Command[2] != "echo ---" {
		t.Errorf("got %d ConfigMaps, command %q", len(m.ConfigMaps), m.Pod.Spec.Containers[0].Command)
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":                    corev1.PullAlways,
		"busybox:latest":             corev1.PullAlways,
		"127.0.0.1:5000/app":         corev1.PullAlways,
		"127.0.0.1:5000/app:1":       corev1.PullIfNotPresent,
		"busybox:1.36":               corev1.PullIfNotPresent,
		"busybox@sha256:0123":        corev1.PullIfNotPresent,
		"busybox:latest@sha256:0123": corev1.PullIfNotPresent,
		"registry.k8s.io/pause:3.10": corev1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

// An image volume's pullPolicy defaults as a container's imagePullPolicy
// does (the API server's SetDefaults_ImageVolumeSource).
func TestImageVolumeDefaults(t *testing.T) {
	m, err := Parse([]byte(pod("volumes:\n- name: tagged\n  image: {reference: 'busybox:1.36'}\n- name: latest\n  image: {reference: busybox}\n- name: never\n  image: {reference: busybox, pullPolicy: Never}\ncontainers:\n- name: app\n  image: busybox\n  volumeMounts: [{name: tagged, mountPath: /t}]\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullAlways, corev1.PullNever}
	for i, v := range m.Pod.Spec.Volumes {
		if v.Image == nil || v.Image.PullPolicy != want[i] {
			t.Errorf("volume %s: image %+v, want pullPolicy %s", v.Name, v.Image, want[i])
		}
	}
}
