package specgen

import (
	"context"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
)

// The seccomp profiles a container runs under, as layers.json records
// them (Layers.Seccomp) and inspect shows them; a Localhost one is
// followed by its file.
const (
	SeccompRuntimeDefault = "RuntimeDefault"
	SeccompLocalhost      = "Localhost"
	SeccompUnconfined     = "Unconfined"
)

// The deprecated seccomp_profile_path values containerd still accepts.
const (
	seccompPathRuntimeDefault = "runtime/default"
	seccompPathDockerDefault  = "docker/default"
	seccompPathUnconfined     = "unconfined"
	seccompPathLocalhost      = "localhost/"
)

// seccompProfile is the profile a container's security context asks for:
// its seccomp field, else its deprecated seccomp_profile_path read as
// containerd reads it. nil when it asks for none: the CRI default is
// unconfined (the kubelet asks for RuntimeDefault itself when it wants it).
func seccompProfile(sc *runtimeapi.LinuxContainerSecurityContext) (*runtimeapi.SecurityProfile, error) {
	const field = "config.linux.security_context.seccomp"
	if sp := sc.GetSeccomp(); sp != nil {
		switch sp.ProfileType {
		case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
			if sp.LocalhostRef != "" {
				return nil, errdefs.InvalidArgument("%s.localhost_ref: set for profile type %s (only Localhost takes one)", field, sp.ProfileType)
			}
		case runtimeapi.SecurityProfile_Localhost:
		default:
			return nil, errdefs.InvalidArgument("%s.profile_type: %d is not RuntimeDefault, Unconfined or Localhost", field, sp.ProfileType)
		}
		return sp, nil
	}
	//lint:ignore SA1019 deprecated, but containerd still honours it and so do we
	switch path := sc.GetSeccompProfilePath(); {
	case path == "":
		return nil, nil
	case path == seccompPathRuntimeDefault || path == seccompPathDockerDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case path == seccompPathUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case strings.HasPrefix(path, seccompPathLocalhost):
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: strings.TrimPrefix(path, seccompPathLocalhost)}, nil
	default:
		return nil, errdefs.InvalidArgument("config.linux.security_context.seccomp_profile_path: %q is not %s, %s, %s or %s<file>", path, seccompPathRuntimeDefault, seccompPathDockerDefault, seccompPathUnconfined, seccompPathLocalhost)
	}
}

// applySeccomp sets s's seccomp profile from the container's security
// context and returns which it is (SeccompRuntimeDefault, SeccompLocalhost
// and the file, SeccompUnconfined). s's capabilities must be set: the
// profiles allow some syscalls by capability. A privileged container runs
// unconfined, as with containerd and CRI-O.
func applySeccomp(s *specs.Spec, sc *runtimeapi.LinuxContainerSecurityContext) (string, error) {
	sp, err := seccompProfile(sc)
	if err != nil {
		return "", err
	}
	if sc.Privileged || sp == nil || sp.ProfileType == runtimeapi.SecurityProfile_Unconfined {
		s.Linux.Seccomp = nil
		return SeccompUnconfined, nil
	}
	if sp.ProfileType == runtimeapi.SecurityProfile_RuntimeDefault {
		if s.Linux.Seccomp, err = oci.DefaultSeccomp(s); err != nil {
			return "", errdefs.Wrap(errdefs.ErrInvalidArgument, err)
		}
		return SeccompRuntimeDefault, nil
	}
	field := "config.linux.security_context.seccomp.localhost_ref"
	if sc.GetSeccomp() == nil {
		field = "config.linux.security_context.seccomp_profile_path"
	}
	// A kubelet sends the profile's absolute path on the node (its
	// seccomp root joined with the pod's localhostProfile).
	path := strings.TrimPrefix(sp.LocalhostRef, seccompPathLocalhost)
	if !filepath.IsAbs(path) {
		return "", errdefs.InvalidArgument("%s: %q: a Localhost profile is an absolute path on the node", field, sp.LocalhostRef)
	}
	if s.Linux.Seccomp, err = oci.LoadSeccomp(path, s); err != nil {
		return "", errdefs.InvalidArgument("%s: %v", field, err)
	}
	return SeccompLocalhost + " " + path, nil
}

// WithSeccomp sets the process's seccomp profile (see applySeccomp) and
// records in profile which it is.
func WithSeccomp(sc *runtimeapi.LinuxContainerSecurityContext, profile *string) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		p, err := applySeccomp(s, sc)
		if err != nil {
			return err
		}
		*profile = p
		return nil
	}
}
