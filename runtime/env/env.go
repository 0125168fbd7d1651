// Package env builds a container's environment the way the kubelet does
// (GenerateRunContainerOptions → makeEnvironmentVariables), and then the way a
// CRI runtime folds it into the OCI process.env, while keeping track of where
// every variable came from.
//
// The kubelet concatenates the device plugins' Allocate envs and the
// container's own envs (seed 002: "opts.Envs = append(opts.Envs, envs...)")
// with no check for duplicates; containerd then lays that list over the image
// config's Env with later entries replacing earlier ones. A user env with the
// same name as a device plugin env therefore silently wins. Build reproduces
// that chain, reports every such override, and lets a policy decide who wins.
//
// Order of application, lowest first:
//
//	image config Env → device plugin envs → platform injection → container envFrom, env
//
// The final list has one entry per name. A name keeps the position of its
// first definition and takes the value of the definition the policy keeps:
// exactly what containerd's replaceOrAppendEnvValues does to the duplicated
// list the kubelet sends (value replaced in place, new names appended).
package env

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Source kinds, in kubelet's order of application.
const (
	SourceImage        = "image"         // image config Env (lowest; a CRI runtime puts these first and later ones override)
	SourceDevicePlugin = "device-plugin" // (1) device plugin Allocate envs
	SourcePlatform     = "platform"      // (2) platform injection rules
	SourceContainer    = "container"     // (3) the container's own env / envFrom
)

// Var is one definition of an environment variable and where it came from.
type Var struct {
	Name, Value string
	Source      string // one of the Source* kinds
	Origin      string // what exactly: "example.com/gpu", rule name, "env[2]", "envFrom[0] configMap app-config", "image busybox:latest"
}

// Override records a name defined more than once. Winner is the definition
// that is kept and Loser the one discarded. Under PolicyKubelet Loser is
// always the earlier definition; under PolicyPlatformWins a protected earlier
// definition can be the Winner.
type Override struct {
	Name          string
	Loser, Winner Var
	Policy        string
}

// Policies for a key defined by more than one source.
const (
	PolicyKubelet      = "kubelet"       // later source wins (device < platform < container): seed 002's problem, faithful to kubelet
	PolicyPlatformWins = "platform-wins" // device-plugin and platform keys are protected: a container env cannot override them (image envs still lose to everything)
	PolicyReject       = "reject"        // a key defined by two different sources (image excepted) is an error naming the key and both sources
)

// PodInfo is what fieldRef and resourceFieldRef can see.
type PodInfo struct {
	Pod      *corev1.Pod
	PodIPs   []string
	HostIP   string
	NodeName string // defaults to os.Hostname() by the caller
}

// Input is everything Build needs for one container.
type Input struct {
	Container    *corev1.Container
	Pod          PodInfo
	ConfigMaps   map[string]*corev1.ConfigMap // by name, in the pod's namespace
	Secrets      map[string]*corev1.Secret    // by name, in the pod's namespace
	Image        []string                     // image config Env "K=V"
	ImageRef     string
	DevicePlugin []Var  // already resolved by the caller (Source/Origin set)
	Platform     []Var  // already resolved by the caller (Source/Origin set)
	Policy       string // "" = kubelet
}

// Result is the merged environment.
type Result struct {
	// Env is the final list, one entry per name, in OCI process.env order:
	// a name sits where it was first defined (image, device plugin, platform,
	// container envFrom, container env, in that order) and carries the value
	// of the definition the policy kept. The kubelet itself emits the
	// container's own envs in Go map order; podlab uses declaration order
	// (envFrom entries in order, each ConfigMap/Secret's keys sorted, then
	// env) so that runs are reproducible.
	Env []Var
	// Overrides lists every name defined more than once, in the order the
	// second definitions were met, including duplicates within one source.
	Overrides []Override
	// Skipped names inputs that were dropped without failing: envFrom keys
	// that are not valid environment variable names (the kubelet skips them
	// and records an InvalidEnvironmentVariableNames event) and image Env
	// entries without '='. Each is "NAME (origin)".
	Skipped []string
}

// Strings renders Env as "K=V" for the OCI spec.
func (r *Result) Strings() []string {
	out := make([]string, len(r.Env))
	for i, v := range r.Env {
		out[i] = v.Name + "=" + v.Value
	}
	return out
}

// Build resolves and merges the environment of in.Container.
func Build(in Input) (*Result, error) {
	if in.Container == nil {
		return nil, errors.New("build env: no container")
	}
	policy := in.Policy
	switch policy {
	case "":
		policy = PolicyKubelet
	case PolicyKubelet, PolicyPlatformWins, PolicyReject:
	default:
		return nil, fmt.Errorf("build env for container %q: unknown env merge policy %q (want %s, %s or %s)",
			in.Container.Name, in.Policy, PolicyKubelet, PolicyPlatformWins, PolicyReject)
	}
	n := len(in.Image) + len(in.DevicePlugin) + len(in.Platform) + len(in.Container.Env)
	m := &merger{policy: policy, index: make(map[string]int, n), vars: make([]Var, 0, n)}
	res := &Result{}

	imageOrigin := "image"
	if in.ImageRef != "" {
		imageOrigin = "image " + in.ImageRef
	}
	for _, kv := range in.Image {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			// containerd reads a bare "K" as "unset K"; at the bottom of
			// the stack there is nothing to unset, so it is dropped.
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (%s)", kv, imageOrigin))
			continue
		}
		m.add(Var{Name: k, Value: v, Source: SourceImage, Origin: imageOrigin})
	}

	for _, group := range []struct {
		source string
		vars   []Var
	}{{SourceDevicePlugin, in.DevicePlugin}, {SourcePlatform, in.Platform}} {
		for _, v := range group.vars {
			if v.Source == "" {
				v.Source = group.source
			} else if v.Source != group.source {
				return nil, fmt.Errorf("build env for container %q: %s env %s from %s is marked as source %q",
					in.Container.Name, group.source, v.Name, v.Origin, v.Source)
			}
			// These names come from outside the pod spec, so nothing has
			// validated them yet.
			if errs := validation.IsEnvVarName(v.Name); len(errs) != 0 {
				return nil, fmt.Errorf("build env for container %q: %s env %q from %s: invalid name: %s",
					in.Container.Name, group.source, v.Name, v.Origin, strings.Join(errs, "; "))
			}
			if err := m.add(v); err != nil {
				return nil, fmt.Errorf("build env for container %q: %w", in.Container.Name, err)
			}
		}
	}

	if err := containerEnv(in, m, res); err != nil {
		return nil, err
	}
	res.Env = m.vars
	res.Overrides = m.overrides
	return res, nil
}

// merger keeps one entry per name in first-definition order.
type merger struct {
	policy    string
	vars      []Var
	index     map[string]int
	overrides []Override
}

func protected(source string) bool {
	return source == SourceDevicePlugin || source == SourcePlatform
}

func (m *merger) add(v Var) error {
	i, ok := m.index[v.Name]
	if !ok {
		m.index[v.Name] = len(m.vars)
		m.vars = append(m.vars, v)
		return nil
	}
	prev := m.vars[i]
	winner, loser := v, prev
	switch {
	case prev.Source == v.Source || prev.Source == SourceImage:
		// Within one source the later definition wins, as in the kubelet's
		// maps (tmpEnv, the device manager's env map). Image envs are
		// defaults that anything may override, under every policy.
	case m.policy == PolicyReject:
		return fmt.Errorf("env %s is set by both %s (%s) and %s (%s); the env merge policy %q forbids overrides",
			v.Name, prev.Source, prev.Origin, v.Source, v.Origin, m.policy)
	case m.policy == PolicyPlatformWins && protected(prev.Source) && v.Source == SourceContainer:
		winner, loser = prev, v
	}
	m.overrides = append(m.overrides, Override{Name: v.Name, Loser: loser, Winner: winner, Policy: m.policy})
	m.vars[i] = winner
	return nil
}

// containerEnv adds the container's envFrom and env, in the kubelet's order:
// every envFrom source first, then env entries, which override them.
func containerEnv(in Input, m *merger, res *Result) error {
	c := in.Container
	path := containerPath(in.Pod.Pod, c)
	ns := "default"
	if in.Pod.Pod != nil && in.Pod.Pod.Namespace != "" {
		ns = in.Pod.Pod.Namespace
	}
	// tmpEnv is the kubelet's expansion context: the container's own
	// variables defined so far. Device-plugin, platform and image envs are
	// not in it, so $(NVIDIA_VISIBLE_DEVICES) in a value stays literal unless
	// the container defines that name itself.
	tmpEnv := make(map[string]string, len(c.Env))
	add := func(name, value, origin string) error {
		tmpEnv[name] = value
		if err := m.add(Var{Name: name, Value: value, Source: SourceContainer, Origin: origin}); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	}

	for i, ef := range c.EnvFrom {
		var (
			kind, name string
			optional   bool
			data       map[string]string
			found      bool
		)
		switch {
		case ef.ConfigMapRef != nil:
			kind, name = "configMap", ef.ConfigMapRef.Name
			optional = ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional
			if cm := in.ConfigMaps[name]; cm != nil {
				data, found = cm.Data, true
			}
		case ef.SecretRef != nil:
			kind, name = "secret", ef.SecretRef.Name
			optional = ef.SecretRef.Optional != nil && *ef.SecretRef.Optional
			if s := in.Secrets[name]; s != nil {
				data, found = secretData(s), true
			}
		default:
			continue // the kubelet ignores an entry with neither reference
		}
		field := subPath(path, fmt.Sprintf("envFrom[%d].%sRef", i, kind))
		if !found {
			if optional {
				continue
			}
			return fmt.Errorf("%s: %s %s/%s not found", field, kind, ns, name)
		}
		origin := fmt.Sprintf("envFrom[%d] %s %s", i, kind, name)
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			key := ef.Prefix + k
			if errs := validation.IsEnvVarName(key); len(errs) != 0 {
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s (%s)", key, origin))
				continue
			}
			if err := add(key, data[k], origin); err != nil {
				return err
			}
		}
	}

	mapping := func(name string) (string, bool) {
		v, ok := tmpEnv[name]
		return v, ok
	}
	for i, e := range c.Env {
		origin := fmt.Sprintf("env[%d]", i)
		value := e.Value
		if value != "" {
			value = Expand(value, mapping)
		} else if e.ValueFrom != nil {
			field := subPath(path, fmt.Sprintf("env[%d].valueFrom", i))
			v, ok, err := resolveValueFrom(in, e.ValueFrom, field, ns)
			if err != nil {
				return err
			}
			if !ok {
				continue // optional and missing: the variable is not set at all
			}
			value = v
		}
		if err := add(e.Name, value, origin); err != nil {
			return err
		}
	}
	return nil
}

// secretData returns a Secret's data as strings, with stringData merged over
// data the way the API server does on write (the manifest loader already
// does this; callers building Secrets by hand get the same answer).
func secretData(s *corev1.Secret) map[string]string {
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// subPath appends a field to a container path: "spec.containers[0]" +
// "env[2]" is "spec.containers[0].env[2]", and for a container that is not in
// the pod, `container "app"` + "env[2]" is `container "app" env[2]`.
func subPath(container, field string) string {
	if strings.HasPrefix(container, "spec.") {
		return container + "." + field
	}
	return container + " " + field
}

// containerPath names the container the way validation errors do:
// spec.containers[0], spec.initContainers[1], spec.ephemeralContainers[0].
func containerPath(pod *corev1.Pod, c *corev1.Container) string {
	if pod != nil {
		for _, list := range []struct {
			field string
			cs    []corev1.Container
		}{{"spec.initContainers", pod.Spec.InitContainers}, {"spec.containers", pod.Spec.Containers}} {
			for i := range list.cs {
				if &list.cs[i] == c {
					return fmt.Sprintf("%s[%d]", list.field, i)
				}
			}
		}
		for i := range pod.Spec.InitContainers {
			if pod.Spec.InitContainers[i].Name == c.Name {
				return fmt.Sprintf("spec.initContainers[%d]", i)
			}
		}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == c.Name {
				return fmt.Sprintf("spec.containers[%d]", i)
			}
		}
		for i := range pod.Spec.EphemeralContainers {
			if pod.Spec.EphemeralContainers[i].Name == c.Name {
				return fmt.Sprintf("spec.ephemeralContainers[%d]", i)
			}
		}
	}
	return fmt.Sprintf("container %q", c.Name)
}
