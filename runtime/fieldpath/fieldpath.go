// Package fieldpath reads a pod's metadata by downward-API field path, for
// env vars (valueFrom.fieldRef) and downwardAPI volumes alike. It is the
// kubelet's pkg/fieldpath (ExtractFieldPathAsString,
// SplitMaybeSubscriptedPath, FormatMap), which lives in k8s.io/kubernetes,
// a module not meant to be imported.
package fieldpath

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Extract is the value of fieldPath in pod's metadata: metadata.name,
// .namespace, .uid, .labels and .annotations (whole maps as FormatMap), and
// one label or annotation by subscript, metadata.labels['key'].
func Extract(pod *corev1.Pod, fieldPath string) (string, error) {
	if path, key, ok := SplitMaybeSubscriptedPath(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			// Annotation keys are validated case-insensitively.
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[key], nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[key], nil
		default:
			return "", fmt.Errorf("fieldPath %q does not support subscript", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.annotations":
		return FormatMap(pod.Annotations), nil
	case "metadata.labels":
		return FormatMap(pod.Labels), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q (supported: metadata.name, metadata.namespace, metadata.uid, metadata.labels, metadata.annotations)", fieldPath)
}

// SplitMaybeSubscriptedPath splits metadata.labels['key'] into
// metadata.labels and key; ok is false for a path without a subscript.
func SplitMaybeSubscriptedPath(fieldPath string) (path, key string, ok bool) {
	if !strings.HasSuffix(fieldPath, "']") {
		return "", "", false
	}
	path, key, ok = strings.Cut(strings.TrimSuffix(fieldPath, "']"), "['")
	if !ok || path == "" {
		return "", "", false
	}
	return path, key, true
}

// FormatMap renders a whole label or annotation map as the downward API
// does: one key="value" line per entry, sorted by key, values quoted with
// strconv.Quote, no trailing newline.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = append(b, k...)
		b = append(b, '=')
		b = strconv.AppendQuote(b, m[k])
	}
	return string(b)
}
