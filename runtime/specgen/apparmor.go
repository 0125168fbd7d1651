package specgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/moby/profiles/apparmor"
	runcapparmor "github.com/opencontainers/runc/libcontainer/apparmor"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
)

// AppArmorDefaultProfile is the profile a container runs under where
// AppArmor is enabled and the container asks for RuntimeDefault, or for
// nothing: podlab's counterpart of containerd's cri-containerd.apparmor.d
// and CRI-O's crio-default, generated from moby's template (the one they
// share) and loaded with apparmor_parser on first use.
const AppArmorDefaultProfile = "podlab-default"

// The deprecated apparmor_profile values, as containerd reads them.
const (
	appArmorPathRuntimeDefault = "runtime/default"
	appArmorPathDockerDefault  = "docker/default"
	appArmorPathUnconfined     = "unconfined"
	appArmorPathLocalhost      = "localhost/"
)

// appArmorProfile is the profile a container's security context asks for:
// its apparmor field, else its deprecated apparmor_profile. nil when it
// asks for none.
func appArmorProfile(sc *runtimeapi.LinuxContainerSecurityContext) (*runtimeapi.SecurityProfile, error) {
	const field = "config.linux.security_context.apparmor"
	if sp := sc.GetApparmor(); sp != nil {
		switch sp.ProfileType {
		case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
			if sp.LocalhostRef != "" {
				return nil, errdefs.InvalidArgument("%s.localhost_ref: set for profile type %s (only Localhost takes one)", field, sp.ProfileType)
			}
		case runtimeapi.SecurityProfile_Localhost:
			if strings.TrimPrefix(sp.LocalhostRef, appArmorPathLocalhost) == "" {
				return nil, errdefs.InvalidArgument("%s.localhost_ref: required for profile type Localhost", field)
			}
		default:
			return nil, errdefs.InvalidArgument("%s.profile_type: %d is not RuntimeDefault, Unconfined or Localhost", field, sp.ProfileType)
		}
		return sp, nil
	}
	//lint:ignore SA1019 older kubelets still send only the deprecated field
	switch path := sc.GetApparmorProfile(); {
	case path == "":
		return nil, nil
	case path == appArmorPathRuntimeDefault || path == appArmorPathDockerDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case path == appArmorPathUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case strings.HasPrefix(path, appArmorPathLocalhost) && len(path) > len(appArmorPathLocalhost):
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: strings.TrimPrefix(path, appArmorPathLocalhost)}, nil
	default:
		return nil, errdefs.InvalidArgument("config.linux.security_context.apparmor_profile: %q is not %s, %s or %s<profile>", path, appArmorPathRuntimeDefault, appArmorPathUnconfined, appArmorPathLocalhost)
	}
}

// AppArmorHost is what the choice of a profile needs of the host.
type AppArmorHost struct {
	enabled     bool
	loaded      func(name string) (bool, error)
	loadDefault func() error // loads AppArmorDefaultProfile if it is not
}

// HostAppArmor is this host's AppArmor, as runc sees it (the module's
// enabled parameter), with the kernel's list of loaded profiles.
func HostAppArmor() AppArmorHost {
	return AppArmorHost{enabled: runcapparmor.IsEnabled(), loaded: apparmor.IsLoaded, loadDefault: loadAppArmorDefault}
}

// applyAppArmor sets s's AppArmor profile from the container's security
// context, as containerd does: where AppArmor is off, a request for any
// profile but Unconfined fails (a profile silently not applied would be
// a lie); where it is on, no request means RuntimeDefault, a privileged
// container runs unconfined under RuntimeDefault, and a Localhost profile
// must be loaded already. It returns the profile set ("" for none).
func applyAppArmor(s *specs.Spec, sc *runtimeapi.LinuxContainerSecurityContext, host AppArmorHost) (string, error) {
	sp, err := appArmorProfile(sc)
	if err != nil {
		return "", err
	}
	s.Process.ApparmorProfile = ""
	if !host.enabled {
		if sp != nil && sp.ProfileType != runtimeapi.SecurityProfile_Unconfined {
			return "", errdefs.InvalidArgument("config.linux.security_context.apparmor: %s: apparmor is not supported (not enabled on this host)", sp.ProfileType)
		}
		return "", nil
	}
	if sp == nil {
		sp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	}
	switch sp.ProfileType {
	case runtimeapi.SecurityProfile_Unconfined:
		return "", nil
	case runtimeapi.SecurityProfile_RuntimeDefault:
		if sc.GetPrivileged() {
			return "", nil
		}
		if err := host.loadDefault(); err != nil {
			return "", fmt.Errorf("apparmor profile %s: %w", AppArmorDefaultProfile, err)
		}
		s.Process.ApparmorProfile = AppArmorDefaultProfile
	default: // Localhost, checked by appArmorProfile
		name := strings.TrimPrefix(sp.LocalhostRef, appArmorPathLocalhost)
		ok, err := host.loaded(name)
		if err != nil {
			return "", fmt.Errorf("apparmor profile %s: %w", name, err)
		}
		if !ok {
			return "", errdefs.InvalidArgument("config.linux.security_context.apparmor: apparmor profile %s is not loaded", name)
		}
		s.Process.ApparmorProfile = name
	}
	return s.Process.ApparmorProfile, nil
}

var loadDefaultMu sync.Mutex

// loadAppArmorDefault loads podlab's default profile unless the kernel
// has it: once per boot, not per container (apparmor_parser takes tens
// of milliseconds). It stays loaded, as containerd's does.
func loadAppArmorDefault() error {
	loadDefaultMu.Lock()
	defer loadDefaultMu.Unlock()
	if ok, err := apparmor.IsLoaded(AppArmorDefaultProfile); err != nil || ok {
		return err
	}
	if err := apparmor.InstallDefault(AppArmorDefaultProfile); err != nil {
		return errors.New(strings.TrimSpace(err.Error()))
	}
	return nil
}

// UnloadAppArmorDefault removes podlab's default profile from the kernel,
// if it is there: for a test that must leave the host as it found it.
func UnloadAppArmorDefault() error {
	loadDefaultMu.Lock()
	defer loadDefaultMu.Unlock()
	if ok, err := apparmor.IsLoaded(AppArmorDefaultProfile); err != nil || !ok {
		return err
	}
	// The kernel's interface: the profile's name written to .remove.
	return os.WriteFile("/sys/kernel/security/apparmor/.remove", []byte(AppArmorDefaultProfile), 0)
}

// checkAppArmor checks the AppArmor profile the security context asks
// for, before the rest of the security context is read: a bad request
// fails the same way whether or not this host has AppArmor.
func checkAppArmor(sc *runtimeapi.LinuxContainerSecurityContext) Opt {
	return func(context.Context, *specs.Spec) error {
		_, err := appArmorProfile(sc)
		return err
	}
}

// WithAppArmor sets the process's AppArmor profile (see applyAppArmor).
func WithAppArmor(sc *runtimeapi.LinuxContainerSecurityContext, host AppArmorHost) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		_, err := applyAppArmor(s, sc, host)
		return err
	}
}
