package specgen

import (
	"context"
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/env"
)

// defaultPath is containerd's default PATH for images that set none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// WithTTY gives the process a terminal as the config asks: the shim gives
// the init a pty for its stdio (TERM is WithEnv's).
func WithTTY(tty bool) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Process.Terminal = tty
		return nil
	}
}

// WithProcessArgs sets the process's arguments by the Kubernetes rules
// over the image's Entrypoint and Cmd (see imageArgs); none is an error.
func WithProcessArgs(cfg *runtimeapi.ContainerConfig, img *rootfs.Image) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Process.Args = imageArgs(cfg.Command, cfg.Args, img.Config.Entrypoint, img.Config.Cmd)
		if len(s.Process.Args) == 0 {
			return fmt.Errorf("container %q: no command given and image %s has no entrypoint or cmd", cfg.Metadata.Name, img.Name)
		}
		return nil
	}
}

// imageArgs applies the Kubernetes rules for command/args over the image's
// Entrypoint/Cmd: command replaces Entrypoint (and drops Cmd); args replace Cmd.
func imageArgs(command, args, entrypoint, cmd []string) []string {
	switch {
	case len(command) > 0:
		return append(append([]string(nil), command...), args...)
	case len(args) > 0:
		return append(append([]string(nil), entrypoint...), args...)
	default:
		return append(append([]string(nil), entrypoint...), cmd...)
	}
}

// WithEnv sets the process's environment: the image's envs first, then
// TERM for a tty (as containerd's WithTTY sets it, before the CRI's
// envs), then the CRI envs and the runtime point's replace or extend them,
// as containerd's WithEnv does; PATH and HOSTNAME (hostname, the
// sandbox's) default when none of them sets it.
func WithEnv(cfg *runtimeapi.ContainerConfig, img *rootfs.Image, injected []env.Var, hostname string) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		envs := append([]string(nil), img.Config.Env...)
		if cfg.Tty {
			envs = ReplaceEnv(envs, "TERM=xterm")
		}
		for _, kv := range cfg.Envs {
			envs = ReplaceEnv(envs, kv.Key+"="+string(kv.Value))
		}
		for _, v := range injected {
			envs = ReplaceEnv(envs, v.Name+"="+v.Value)
		}
		// HOSTNAME is the sandbox's hostname, as containerd, CRI-O and Docker
		// set it (scripts read $HOSTNAME, as the StatefulSet tutorial's do).
		if hostname != "" && !hasEnv(envs, "HOSTNAME") {
			envs = append([]string{"HOSTNAME=" + hostname}, envs...)
		}
		if !hasEnv(envs, "PATH") {
			envs = append([]string{defaultPath}, envs...)
		}
		s.Process.Env = envs
		return nil
	}
}

// ReplaceEnv sets kv ("NAME=value") in envs: in place of NAME's entry,
// or appended.
func ReplaceEnv(envs []string, kv string) []string {
	k := kv[:strings.IndexByte(kv, '=')+1]
	for i, e := range envs {
		if strings.HasPrefix(e, k) {
			envs[i] = kv
			return envs
		}
	}
	return append(envs, kv)
}

func hasEnv(envs []string, name string) bool {
	for _, e := range envs {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

// WithCwd sets the working directory: the config's, else the image's,
// else /.
func WithCwd(configDir, imageDir string) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Process.Cwd = configDir
		if s.Process.Cwd == "" {
			s.Process.Cwd = imageDir
		}
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		return nil
	}
}
