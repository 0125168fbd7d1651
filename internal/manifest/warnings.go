package manifest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Which Pod fields podlab implements is data: a table keyed by field path,
// with "[*]" for any list index. Warnings come from walking the fields the
// manifest sets against it, so supporting a new field is one table line.
// A set field whose path is not in the table is warned about as ignored.

type ruleKind int

const (
	unsupported ruleKind = iota // warn (with msg, if given)
	supported                   // podlab implements it and everything below it
	partial                     // podlab implements some fields below it: walk in
	values                      // podlab implements only the listed values
)

type rule struct {
	kind   ruleKind
	values []string // for kind values
	msg    string   // replaces the generic warning text; %q is the value for kind values
}

var (
	handled = rule{kind: supported}
	walkIn  = rule{kind: partial}
)

func only(vals ...string) rule { return rule{kind: values, values: vals} }

// supportTable is built on first use: package init runs in every container
// start (libcontainer re-execs the binary), so it must stay cheap.
var supportTable = sync.OnceValue(func() map[string]rule {
	t := map[string]rule{
		"apiVersion": handled,
		"kind":       handled,

		"metadata":             walkIn,
		"metadata.name":        handled,
		"metadata.namespace":   handled,
		"metadata.uid":         handled,
		"metadata.labels":      handled,
		"metadata.annotations": handled,

		"spec":                                    walkIn,
		"spec.volumes":                            handled, // validation rejects the sources podlab cannot build
		"spec.initContainers":                     walkIn,
		"spec.containers":                         walkIn,
		"spec.restartPolicy":                      handled,
		"spec.terminationGracePeriodSeconds":      handled,
		"spec.dnsPolicy":                          only(string(corev1.DNSClusterFirst)),
		"spec.serviceAccountName":                 handled,
		"spec.nodeName":                           handled,
		"spec.hostNetwork":                        handled,
		"spec.hostPID":                            handled,
		"spec.hostIPC":                            handled,
		"spec.hostUsers":                          handled,
		"spec.shareProcessNamespace":              handled,
		"spec.hostname":                           handled,
		"spec.subdomain":                          handled,
		"spec.imagePullSecrets":                   handled, // credentials for PullImage
		"spec.runtimeClassName":                   handled, // the CRI runtime handler of that name
		"spec.securityContext":                    walkIn,
		"spec.securityContext.runAsUser":          handled,
		"spec.securityContext.runAsGroup":         handled,
		"spec.securityContext.runAsNonRoot":       handled,
		"spec.securityContext.supplementalGroups": handled,
		"spec.securityContext.fsGroup":            handled,
		"spec.securityContext.seccompProfile":     handled,
		"spec.securityContext.appArmorProfile":    handled,
		"spec.securityContext.sysctls":            handled,
		// Values that change nothing without a cluster, or are the defaults
		// `kubectl get -o yaml` prints.
		"spec.enableServiceLinks":           handled, // no Services, so no service env vars either way
		"spec.automountServiceAccountToken": only("false"),
		"spec.schedulerName":                only(corev1.DefaultSchedulerName),
		"spec.priority":                     only("0"),
		"spec.preemptionPolicy":             only(string(corev1.PreemptLowerPriority)),

		"status": {msg: "status is ignored"},
	}
	container := map[string]rule{
		"name":       handled,
		"image":      handled,
		"command":    handled,
		"args":       handled,
		"workingDir": handled,
		"env":        handled,
		"envFrom":    handled,

		"resources":          walkIn,
		"resources.limits":   handled,
		"resources.requests": handled,

		"volumeMounts":                      walkIn,
		"volumeMounts[*].name":              handled,
		"volumeMounts[*].mountPath":         handled,
		"volumeMounts[*].subPath":           handled,
		"volumeMounts[*].readOnly":          handled,
		"volumeMounts[*].recursiveReadOnly": only(string(corev1.RecursiveReadOnlyDisabled)),

		"ports":                  walkIn,
		"ports[*].containerPort": handled,
		"ports[*].name":          handled,
		"ports[*].protocol":      handled,
		"ports[*].hostPort":      handled,
		"ports[*].hostIP":        handled,

		"securityContext":                          walkIn,
		"securityContext.runAsUser":                handled,
		"securityContext.runAsGroup":               handled,
		"securityContext.runAsNonRoot":             handled,
		"securityContext.readOnlyRootFilesystem":   handled,
		"securityContext.privileged":               handled,
		"securityContext.capabilities":             handled,
		"securityContext.allowPrivilegeEscalation": handled,
		"securityContext.seccompProfile":           handled,
		"securityContext.appArmorProfile":          handled,

		"imagePullPolicy":          handled,
		"terminationMessagePath":   only(corev1.TerminationMessagePathDefault),
		"terminationMessagePolicy": only(string(corev1.TerminationMessageReadFile)),
	}
	for _, prefix := range []string{"spec.initContainers[*].", "spec.containers[*]."} {
		for k, r := range container {
			t[prefix+k] = r
		}
	}
	return t
})

// unsupportedFields returns one warning per set field of pod that podlab
// ignores, in field order.
func unsupportedFields(pod *corev1.Pod) []string {
	var w []string
	warnStruct(reflect.ValueOf(pod).Elem(), "", nil, supportTable(), &w)
	return w
}

func warnStruct(rv reflect.Value, pattern string, p *field.Path, table map[string]rule, w *[]string) {
	t := rv.Type()
	for i := range t.NumField() {
		sf, fv := t.Field(i), rv.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if sf.Anonymous && name == "" { // inline (TypeMeta, VolumeSource)
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				warnStruct(fv, pattern, p, table, w)
				continue
			}
		}
		if !sf.IsExported() || !isSet(fv) {
			continue
		}
		pat := name
		if pattern != "" {
			pat = pattern + "." + name
		}
		fp := child(p, name)
		r, listed := table[pat]
		switch {
		case !listed || r.kind == unsupported:
			msg := r.msg
			if msg == "" {
				msg = "not supported by podlab, ignored"
			}
			*w = append(*w, fmt.Sprintf("%s: %s", fp, msg))
		case r.kind == partial:
			warnValue(fv, pat, fp, table, w)
		case r.kind == values:
			val := valueString(fv)
			if slices.Contains(r.values, val) {
				continue
			}
			msg := r.msg
			if msg == "" {
				msg = "%q is not supported by podlab, ignored"
			}
			*w = append(*w, fmt.Sprintf("%s: %s", fp, fmt.Sprintf(msg, val)))
		}
	}
}

func warnValue(v reflect.Value, pattern string, p *field.Path, table map[string]rule, w *[]string) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		warnStruct(v, pattern, p, table, w)
	case reflect.Slice:
		for i := range v.Len() {
			warnValue(v.Index(i), pattern+"[*]", p.Index(i), table, w)
		}
	}
}

// isSet reports whether the manifest gave the field a value: non-nil
// pointers count even when they point at a zero value (affinity: {}).
func isSet(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil()
	case reflect.Slice, reflect.Map:
		return v.Len() > 0
	}
	return !v.IsZero()
}

func valueString(v reflect.Value) string {
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return fmt.Sprint(v.Interface())
}
