package runtime

// CRI runtime handlers: the OCI runtime a pod's shim runs its containers
// with, chosen by the pod's runtime_handler from the config's runtimes
// table (containerd's runtimes, CRI-O's crio.runtime.runtimes). The
// default handler ("") is libcontainer in the shim.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/specgen"
)

// handlerCheck is what this process learned of a runtime binary's handler
// on this host: whether it works (a probe container created and deleted)
// and whether it mounts recursively read-only. Learned once per process.
// libcontainer, in process, always works; its features are learned only
// when Status asks (libcontainerFeatures), not on a pod's path.
type handlerCheck struct {
	once sync.Once
	err  error
	rro  bool // recursive read-only mounts
}

// ociConfig is handler name's OCI runtime as configured, without a
// check that it works. An unknown name is an InvalidArgument naming
// field.
func (r *Runtime) ociConfig(field, name string) (oci.RuntimeConfig, error) {
	if name == "" {
		return oci.RuntimeConfig{Type: oci.TypeLibcontainer, Root: r.LibcontainerRoot()}, nil
	}
	rt, ok := r.Config.Runtimes[name]
	if !ok {
		return oci.RuntimeConfig{}, errdefs.InvalidArgument("%s: %q is not configured (configured: %s)", field, name, strings.Join(r.handlerNames(), ", "))
	}
	cfg := oci.RuntimeConfig{Type: rt.Type, Path: rt.Path, OCIVersion: rt.OCIVersion}
	if rt.Type == oci.TypeLibcontainer {
		cfg.Root = r.LibcontainerRoot()
	} else {
		// A root of its own per handler: runc's and crun's state
		// formats differ, and libcontainer's too.
		cfg.Root = filepath.Join(r.Config.StateDir, "oci", name)
	}
	return cfg, nil
}

// LibcontainerRoot is the state root of every libcontainer handler.
func (r *Runtime) LibcontainerRoot() string { return filepath.Join(r.Config.StateDir, "runc") }

// handlerNames are the configured handlers' names, sorted, "" (the
// default) first.
func (r *Runtime) handlerNames() []string {
	names := []string{`""`}
	for name := range r.Config.Runtimes {
		names = append(names, name)
	}
	slices.Sort(names[1:])
	return names
}

// runtimeHandler is the OCI runtime of handler name, for a new pod: it
// must be configured and work on this host.
func (r *Runtime) runtimeHandler(name string) (oci.RuntimeConfig, error) {
	cfg, err := r.ociConfig("runtime_handler", name)
	if err != nil {
		return cfg, err
	}
	chk := r.checkHandler(name, &cfg)
	if chk.err != nil {
		return cfg, errdefs.FailedPrecondition("runtime_handler: %q does not work on this node: %v", name, chk.err)
	}
	return cfg, nil
}

// checkHandler learns, once, whether handler name works here; cfg gets
// the binary's resolved path.
func (r *Runtime) checkHandler(name string, cfg *oci.RuntimeConfig) *handlerCheck {
	v, _ := r.handlerChecks.LoadOrStore(name, &handlerCheck{})
	chk := v.(*handlerCheck)
	chk.once.Do(func() {
		if cfg.Type == oci.TypeLibcontainer {
			return
		}
		cli, err := oci.NewCLI(*cfg)
		if err != nil {
			chk.err = err
			return
		}
		if chk.err = cli.Probe(r.Config.CgroupParent); chk.err != nil {
			return
		}
		chk.rro = specgen.RecursiveReadOnlySupported() && slices.Contains(cli.MountOptions(), "rro")
	})
	if cfg.Type != oci.TypeLibcontainer && cfg.Path == "" && chk.err == nil {
		if cli, err := oci.NewCLI(*cfg); err == nil {
			cfg.Path = cli.Path
		}
	}
	return chk
}

// runtimeHandlers are the handlers that work on this host, with their
// features, for Status; and why each of the others does not.
func (r *Runtime) runtimeHandlers() (ok []*runtimeapi.RuntimeHandler, unavailable map[string]string) {
	unavailable = map[string]string{}
	names := append([]string{""}, r.handlerNames()[1:]...)
	for _, name := range names {
		cfg, err := r.ociConfig("runtime_handler", name)
		if err != nil {
			continue
		}
		chk := r.checkHandler(name, &cfg)
		if chk.err != nil {
			unavailable[name] = chk.err.Error()
			continue
		}
		// Only libcontainer runs pods in user namespaces of their own.
		features := &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: chk.rro}
		if cfg.Type == oci.TypeLibcontainer {
			features = r.libcontainerFeatures()
		}
		ok = append(ok, &runtimeapi.RuntimeHandler{Name: name, Features: features})
	}
	return ok, unavailable
}

// libcontainerFeatures probes what the in-process runtime supports here
// (each probe runs once per process).
func (r *Runtime) libcontainerFeatures() *runtimeapi.RuntimeHandlerFeatures {
	return &runtimeapi.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: specgen.RecursiveReadOnlySupported(),
		UserNamespaces:          r.userNamespaces() == nil,
	}
}

// podOCI is the OCI runtime of p's handler, for work on its containers
// where its shim is gone (gc, teardown).
func (r *Runtime) podOCI(p *state.Pod) (oci.Backend, error) {
	cfg, err := r.ociConfig("runtimeHandler", p.RuntimeHandler)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", p.Key(), err)
	}
	b, err := oci.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", p.Key(), err)
	}
	return b, nil
}
