package volume

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// file is the kubelet's volumeutil.FileProjection: content and mode of one
// file of an AtomicWriter volume.
type file struct {
	data []byte
	mode int32
}

// payload is the set of files an AtomicWriter volume holds, keyed by the
// cleaned relative path, with the field that asked for each (for errors).
type payload struct {
	files  map[string]file
	origin map[string]string
}

func newPayload() *payload {
	return &payload{files: map[string]file{}, origin: map[string]string{}}
}

// AtomicWriter limits (pkg/volume/util/atomic_writer.go).
const (
	maxFileNameLength = 255
	maxPathLength     = 4096
)

// add validates p like the AtomicWriter's validatePath (and the API's
// validateLocalDescendingPath), then refuses a path that another file already
// uses, or that is a directory of another file or under one: the API server
// rejects "conflicting duplicate paths" in projected volumes, and the
// AtomicWriter could not write both.
func (pl *payload) add(field, p string, data []byte, mode int32) error {
	if reason := invalidPath(p); reason != "" {
		return fmt.Errorf("%s: invalid value %q: %s", field, p, reason)
	}
	clean := filepath.Clean(p)
	others := make([]string, 0, len(pl.files))
	for o := range pl.files {
		others = append(others, o)
	}
	slices.Sort(others) // a stable error message
	for _, o := range others {
		if o == clean || strings.HasPrefix(clean, o+"/") || strings.HasPrefix(o, clean+"/") {
			return fmt.Errorf("%s: invalid value %q: conflicting duplicate paths (with %s)", field, p, pl.origin[o])
		}
	}
	pl.files[clean] = file{data: data, mode: mode}
	pl.origin[clean] = field
	return nil
}

// invalidPath returns why p cannot be a file path in an AtomicWriter volume,
// or "". Paths are relative, have no ".." element and do not start with ".."
// (the writer reserves those names for ..data and its timestamped dirs).
func invalidPath(p string) string {
	if p == "" {
		return "must not be empty"
	}
	if filepath.IsAbs(p) {
		return "must be a relative path"
	}
	if len(p) > maxPathLength {
		return fmt.Sprintf("must be no more than %d characters", maxPathLength)
	}
	// Split on '\' too, as the API server does.
	elems := strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' })
	for _, e := range elems {
		if e == ".." {
			return "must not contain '..'"
		}
		if len(e) > maxFileNameLength {
			return fmt.Sprintf("file names must be no more than %d characters", maxFileNameLength)
		}
	}
	if len(elems) == 0 || filepath.Clean(p) == "." {
		return "must name a file"
	}
	if strings.HasPrefix(elems[0], "..") {
		return "must not start with '..'"
	}
	if strings.ContainsRune(p, 0) {
		return "must not contain NUL"
	}
	return ""
}

// fileMode returns *m, or def when m is nil, checked like the API server.
func fileMode(m *int32, def int32, field string) (int32, error) {
	if m == nil {
		return def, nil
	}
	if *m < 0 || *m > 0o777 {
		return 0, fmt.Errorf("%s: invalid value %#o: must be a number between 0 and 0777 (octal), both inclusive", field, *m)
	}
	return *m, nil
}

// keyFiles adds the files of a ConfigMap or Secret: every key, or only the
// items (key → path, optional mode). It is the kubelet's configmap/secret
// MakePayload: a missing key is an error unless the source is optional.
func keyFiles(pl *payload, kind, name string, data map[string][]byte, items []corev1.KeyToPath, defaultMode int32, optional bool, field string) error {
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := pl.add(fmt.Sprintf("%s: %s %q key %q", field, kind, name, k), k, data[k], defaultMode); err != nil {
				return err
			}
		}
		return nil
	}
	for i, it := range items {
		ip := fmt.Sprintf("%s.items[%d]", field, i)
		content, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s.key: key %q not found in %s %q", ip, it.Key, kind, name)
		}
		mode, err := fileMode(it.Mode, defaultMode, ip+".mode")
		if err != nil {
			return err
		}
		if err := pl.add(ip+".path", it.Path, content, mode); err != nil {
			return err
		}
	}
	return nil
}

// configMapData merges data and binaryData (the API forbids a key in both;
// data wins, as the kubelet looks there first for items).
func configMapData(cm *corev1.ConfigMap) map[string][]byte {
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	return out
}

// secretData merges stringData over data, as the API server does on write
// (in case the caller did not).
func secretData(s *corev1.Secret) map[string][]byte {
	out := make(map[string][]byte, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = v
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out
}

func lookupConfigMap(src Source, name string, optional bool, field string) (*corev1.ConfigMap, error) {
	if name == "" {
		return nil, fmt.Errorf("%s.name: required", field)
	}
	if cm := src.ConfigMaps[name]; cm != nil {
		return cm, nil
	}
	if optional {
		// The kubelet projects an empty object for a missing optional one.
		return &corev1.ConfigMap{}, nil
	}
	return nil, fmt.Errorf("%s.name: ConfigMap %q not found", field, name)
}

func lookupSecret(src Source, name string, optional bool, field string) (*corev1.Secret, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: required", field)
	}
	if s := src.Secrets[name]; s != nil {
		return s, nil
	}
	if optional {
		return &corev1.Secret{}, nil
	}
	return nil, fmt.Errorf("%s: Secret %q not found", field, name)
}

func isTrue(b *bool) bool { return b != nil && *b }

func configMapPayload(src Source, s *corev1.ConfigMapVolumeSource, field string) (*payload, error) {
	defaultMode, err := fileMode(s.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode, field+".defaultMode")
	if err != nil {
		return nil, err
	}
	optional := isTrue(s.Optional)
	cm, err := lookupConfigMap(src, s.Name, optional, field)
	if err != nil {
		return nil, err
	}
	pl := newPayload()
	if err := keyFiles(pl, "ConfigMap", s.Name, configMapData(cm), s.Items, defaultMode, optional, field); err != nil {
		return nil, err
	}
	return pl, nil
}

func secretPayload(src Source, s *corev1.SecretVolumeSource, field string) (*payload, error) {
	// Secrets default to 0644 too (SecretVolumeSourceDefaultMode).
	defaultMode, err := fileMode(s.DefaultMode, corev1.SecretVolumeSourceDefaultMode, field+".defaultMode")
	if err != nil {
		return nil, err
	}
	optional := isTrue(s.Optional)
	sec, err := lookupSecret(src, s.SecretName, optional, field+".secretName")
	if err != nil {
		return nil, err
	}
	pl := newPayload()
	if err := keyFiles(pl, "Secret", s.SecretName, secretData(sec), s.Items, defaultMode, optional, field); err != nil {
		return nil, err
	}
	return pl, nil
}

func downwardAPIPayload(env *setupEnv, s *corev1.DownwardAPIVolumeSource, field string) (*payload, error) {
	defaultMode, err := fileMode(s.DefaultMode, corev1.DownwardAPIVolumeSourceDefaultMode, field+".defaultMode")
	if err != nil {
		return nil, err
	}
	pl := newPayload()
	if err := downwardAPIFiles(env, pl, s.Items, defaultMode, field); err != nil {
		return nil, err
	}
	return pl, nil
}

// projectedPayload is the kubelet's projected collectData: every source's
// files in one AtomicWriter directory, all with the projected defaultMode.
func projectedPayload(env *setupEnv, s *corev1.ProjectedVolumeSource, field string) (*payload, error) {
	defaultMode, err := fileMode(s.DefaultMode, corev1.ProjectedVolumeSourceDefaultMode, field+".defaultMode")
	if err != nil {
		return nil, err
	}
	pl := newPayload()
	for i := range s.Sources {
		src := &s.Sources[i]
		sp := fmt.Sprintf("%s.sources[%d]", field, i)
		names := setPointerFields(reflect.ValueOf(src).Elem())
		switch {
		case len(names) == 0:
			return nil, fmt.Errorf("%s: one projection source is required", sp)
		case len(names) > 1:
			return nil, fmt.Errorf("%s: may not specify more than 1 projection source (found %s)", sp, strings.Join(names, ", "))
		}
		switch {
		case src.Secret != nil:
			sec, err := lookupSecret(env.src, src.Secret.Name, isTrue(src.Secret.Optional), sp+".secret.name")
			if err != nil {
				return nil, err
			}
			if err := keyFiles(pl, "Secret", src.Secret.Name, secretData(sec), src.Secret.Items, defaultMode, isTrue(src.Secret.Optional), sp+".secret"); err != nil {
				return nil, err
			}
		case src.ConfigMap != nil:
			cm, err := lookupConfigMap(env.src, src.ConfigMap.Name, isTrue(src.ConfigMap.Optional), sp+".configMap")
			if err != nil {
				return nil, err
			}
			if err := keyFiles(pl, "ConfigMap", src.ConfigMap.Name, configMapData(cm), src.ConfigMap.Items, defaultMode, isTrue(src.ConfigMap.Optional), sp+".configMap"); err != nil {
				return nil, err
			}
		case src.DownwardAPI != nil:
			if err := downwardAPIFiles(env, pl, src.DownwardAPI.Items, defaultMode, sp+".downwardAPI"); err != nil {
				return nil, err
			}
		default:
			// serviceAccountToken, clusterTrustBundle, podCertificate need an
			// API server (token, bundle and certificate issuers).
			return nil, fmt.Errorf("%s.%s: not supported by podlab", sp, names[0])
		}
	}
	return pl, nil
}
