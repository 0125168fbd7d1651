// Package manifest parses and validates the pod manifest podlab runs: one
// Kubernetes v1 Pod plus the ConfigMaps and Secrets it references, in a
// (multi-document) YAML or JSON file. It decodes strictly, applies the API
// server's defaults and validates with the API server's messages, so a
// manifest that podlab accepts is one a cluster would accept too; fields that
// podlab knows but does not implement become warnings.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/yaml"
)

// Manifest is a parsed, defaulted and validated pod manifest.
type Manifest struct {
	Pod        *corev1.Pod
	ConfigMaps map[string]*corev1.ConfigMap // by metadata.name
	Secrets    map[string]*corev1.Secret    // by metadata.name; stringData merged into data like the API server does
	Warnings   []string                     // one per unsupported field, naming its path
}

// ParseFile reads and parses the manifest at path; "-" reads stdin.
func ParseFile(path string) (*Manifest, error) {
	var (
		data []byte
		err  error
		name = path
	)
	if path == "-" {
		name = "<stdin>"
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Parse decodes data (YAML documents separated by "---", a JSON object, or a
// v1 List), applies defaults and validates. All problems found are reported
// in one error.
func Parse(data []byte) (*Manifest, error) {
	docs, found, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("empty manifest: no YAML or JSON document found (want one v1 Pod)")
	}

	var (
		errs    []error
		pods    []*corev1.Pod
		podDocs []string
		m       = &Manifest{
			ConfigMaps: map[string]*corev1.ConfigMap{},
			Secrets:    map[string]*corev1.Secret{},
		}
		cmDocs     = map[string]string{}
		secretDocs = map[string]string{}
	)
	for _, d := range docs {
		obj, err := d.decode()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			pods = append(pods, o)
			podDocs = append(podDocs, d.label)
		case *corev1.ConfigMap:
			if prev, dup := cmDocs[o.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: ConfigMap %q is already defined in %s", d.label, o.Name, prev))
				continue
			}
			cmDocs[o.Name] = d.label
			m.ConfigMaps[o.Name] = o
		case *corev1.Secret:
			if prev, dup := secretDocs[o.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: Secret %q is already defined in %s", d.label, o.Name, prev))
				continue
			}
			secretDocs[o.Name] = d.label
			m.Secrets[o.Name] = o
		}
	}
	if len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	switch len(pods) {
	case 0:
		return nil, errors.New("no Pod in manifest: want exactly one v1 Pod")
	case 1:
	default:
		return nil, fmt.Errorf("%d Pods in manifest (%s): want exactly one v1 Pod", len(pods), strings.Join(podDocs, ", "))
	}
	m.Pod = pods[0]

	// Warnings look at what the user wrote, before defaults fill fields in.
	m.Warnings = unsupportedFields(m.Pod)

	defaultPod(m.Pod)
	for _, name := range sortedKeys(m.ConfigMaps) {
		cm := m.ConfigMaps[name]
		defaultNamespace(&cm.ObjectMeta, m.Pod.Namespace)
		if es := validateConfigMap(cm, m.Pod.Namespace); len(es) > 0 {
			errs = append(errs, fmt.Errorf("%s: ConfigMap %q is invalid: %w", cmDocs[name], name, es.ToAggregate()))
		}
	}
	for _, name := range sortedKeys(m.Secrets) {
		s := m.Secrets[name]
		defaultNamespace(&s.ObjectMeta, m.Pod.Namespace)
		if es := validateSecret(s, m.Pod.Namespace); len(es) > 0 {
			errs = append(errs, fmt.Errorf("%s: Secret %q is invalid: %w", secretDocs[name], name, es.ToAggregate()))
		}
		defaultSecret(s)
	}
	if es := validatePod(m.Pod, m.ConfigMaps, m.Secrets); len(es) > 0 {
		what := "Pod"
		if m.Pod.Name != "" {
			what = fmt.Sprintf("Pod %q", m.Pod.Name)
		}
		errs = append(errs, fmt.Errorf("%s is invalid: %w", what, es.ToAggregate()))
	}
	if len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	return m, nil
}

// document is one YAML document (or one item of a v1 List).
type document struct {
	label string // "document 1 (line 12)", used to prefix errors
	json  []byte // the document converted to JSON
}

// splitDocuments splits data on YAML document markers and converts each
// non-empty document to JSON. It also expands v1 Lists into their items.
// found reports whether there was any document at all (an empty List is one).
func splitDocuments(data []byte) (docs []document, found bool, err error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 BOM
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, false, nil
	}
	type chunk struct {
		line int
		text []byte
	}
	var chunks []chunk
	if t := bytes.TrimSpace(data); t[0] == '{' && json.Valid(t) {
		chunks = []chunk{{1, data}} // one JSON object: never split
	} else {
		start, line := 0, 1
		for off := 0; off < len(data); line++ {
			next := len(data)
			if end := bytes.IndexByte(data[off:], '\n'); end >= 0 {
				next = off + end + 1
			}
			switch l := bytes.TrimRight(data[off:next], "\r\n"); {
			case isMarker(l, "---") && off > start: // starts the next document
				chunks = append(chunks, chunk{firstContentLine(data[start:off], line), data[start:off]})
				start = off
			case isMarker(l, "..."): // ends this one
				chunks = append(chunks, chunk{firstContentLine(data[start:next], line+1), data[start:next]})
				start = next
			}
			off = next
		}
		if start < len(data) {
			chunks = append(chunks, chunk{firstContentLine(data[start:], line), data[start:]})
		}
	}

	var (
		errs []error
		n    int
	)
	for _, c := range chunks {
		if c.line == 0 {
			continue // empty document
		}
		label := fmt.Sprintf("document %d (line %d)", n, c.line)
		j, err := yaml.YAMLToJSONStrict(c.text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: not valid YAML: %w", label, err))
			n++
			continue
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue // only comments, or an empty document between markers
		}
		n++
		items, err := listItems(label, j)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if items == nil {
			docs = append(docs, document{label: label, json: j})
			continue
		}
		for i, it := range items {
			docs = append(docs, document{label: fmt.Sprintf("%s items[%d]", label, i), json: it})
		}
	}
	if len(errs) > 0 {
		return nil, true, utilerrors.NewAggregate(errs)
	}
	return docs, n > 0, nil
}

// isMarker reports whether a line is the YAML document marker m ("---" or
// "..."). At column 0 these cannot be content: block scalars in a top-level
// mapping are indented, and quoted scalars may not have such a line.
func isMarker(l []byte, m string) bool {
	rest, ok := bytes.CutPrefix(l, []byte(m))
	return ok && (len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t')
}

// firstContentLine returns the line number of the first line of chunk that
// holds more than a marker, a comment or blanks, for error messages, or 0 if
// there is none; end is the line number just past chunk.
func firstContentLine(chunk []byte, end int) int {
	lines := bytes.SplitAfter(chunk, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		t := bytes.TrimSpace(l)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) && !bytes.Equal(t, []byte("...")) {
			return end - len(lines) + i
		}
	}
	return 0 // nothing but markers, comments and blanks
}

// listItems returns the items of a v1 List document, or nil if the document
// is not a List.
func listItems(label string, j []byte) ([]json.RawMessage, error) {
	var head struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.Unmarshal(j, &head); err != nil || head.Kind != "List" {
		return nil, nil // not an object or not a List: decode reports it
	}
	var list map[string]json.RawMessage
	if err := json.Unmarshal(j, &list); err != nil {
		return nil, nil
	}
	if head.APIVersion != "v1" {
		return nil, fmt.Errorf("%s: apiVersion %s is not supported for kind \"List\" (want \"v1\")", label, jsonString(list["apiVersion"]))
	}
	var errs []error
	for _, k := range sortedKeys(list) {
		switch k {
		case "apiVersion", "kind", "metadata", "items":
		default:
			errs = append(errs, fmt.Errorf("%s: %s: unknown field", label, k))
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list["items"], &items); err != nil {
		errs = append(errs, fmt.Errorf("%s: items: must be a list of objects", label))
	}
	if len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	if items == nil {
		items = []json.RawMessage{} // an empty List is a List, not a plain document
	}
	return items, nil
}

// decode checks the document's apiVersion and kind, decodes it strictly into
// the matching type and reports every unknown or mistyped field by path.
func (d document) decode() (any, error) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(d.json))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", d.label, err)
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a Kubernetes object: got %s, want a mapping with apiVersion and kind", d.label, jsonKind(raw))
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	var target any
	switch kind {
	case "Pod":
		target = &corev1.Pod{}
	case "ConfigMap":
		target = &corev1.ConfigMap{}
	case "Secret":
		target = &corev1.Secret{}
	case "":
		return nil, fmt.Errorf("%s: kind is required (want v1 Pod, ConfigMap, Secret)", d.label)
	case "List":
		return nil, fmt.Errorf("%s: a List may not contain a List", d.label)
	default:
		return nil, fmt.Errorf("%s: kind %q is not supported (want v1 Pod, ConfigMap, Secret)", d.label, kind)
	}
	if apiVersion != "v1" {
		if _, present := obj["apiVersion"]; !present {
			return nil, fmt.Errorf("%s: apiVersion is required for kind %q (want \"v1\")", d.label, kind)
		}
		return nil, fmt.Errorf("%s: apiVersion %s is not supported for kind %q (want \"v1\")", d.label, mustJSON(obj["apiVersion"]), kind)
	}
	if errs := checkFields(obj, reflectTypeOf(target), kind == "Secret"); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s %s: %w", d.label, kind, nameOf(obj), utilerrors.NewAggregate(errs))
	}
	// The walk above vetted every key and type; this decode only fills in.
	dec = json.NewDecoder(bytes.NewReader(d.json))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		return nil, fmt.Errorf("%s: %s %s: %w", d.label, kind, nameOf(obj), err)
	}
	normalize(reflect.ValueOf(target))
	return target, nil
}

// nameOf returns the quoted metadata.name of a raw object, for messages.
func nameOf(obj map[string]any) string {
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok && n != "" {
			return fmt.Sprintf("%q", n)
		}
	}
	return "(unnamed)"
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return "null"
}

func jsonString(r json.RawMessage) string {
	if len(r) == 0 {
		return "(none)"
	}
	return string(r)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func sortedKeys[M ~map[K]V, K ~string, V any](m M) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
