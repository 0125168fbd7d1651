package runtime

import (
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podlab/podlab/internal/errdefs"
)

// validName checks a name podlab uses in paths (netns file, lock, log and
// bundle directories): 1-253 characters of [A-Za-z0-9._-], not starting
// with "." and without "..", so no name can climb out of its directory.
func validName(field, name string) error {
	switch {
	case name == "":
		return errdefs.InvalidArgument("%s: required", field)
	case len(name) > 253:
		return errdefs.InvalidArgument("%s: longer than 253 characters", field)
	case strings.Contains(name, "/"):
		return errdefs.InvalidArgument("%s: %q must not contain '/'", field, name)
	case strings.Contains(name, ".."):
		return errdefs.InvalidArgument("%s: %q must not contain '..'", field, name)
	case name[0] == '.':
		return errdefs.InvalidArgument("%s: %q must not start with '.'", field, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errdefs.InvalidArgument("%s: %q: character %q not allowed (allowed: A-Z a-z 0-9 . _ -)", field, name, c)
		}
	}
	return nil
}

// validNamespace checks a pod namespace: a DNS-1123 label, as Kubernetes
// namespaces are ("_" separates namespace and name in podlab's paths).
func validNamespace(field, ns string) error {
	if ns == "" {
		return errdefs.InvalidArgument("%s: required", field)
	}
	if strings.Contains(ns, "/") || strings.Contains(ns, "..") {
		return errdefs.InvalidArgument("%s: %q must not contain '/' or '..'", field, ns)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return errdefs.InvalidArgument("%s: %q: %s", field, ns, strings.Join(errs, "; "))
	}
	return nil
}

// cleanAbs reports whether p is absolute and clean (no "..", no "//").
func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// validContainerPath checks a mount path: absolute, and no ".." component
// (inside a container a runtime resolves it within the rootfs, but a
// request that tries to climb out is wrong, not something to fix up).
func validContainerPath(field, p string) error {
	if err := noNUL(field, p); err != nil {
		return err
	}
	if !filepath.IsAbs(p) {
		return errdefs.InvalidArgument("%s: %q must be absolute", field, p)
	}
	for _, comp := range strings.Split(p, "/") {
		if comp == ".." {
			return errdefs.InvalidArgument("%s: %q must not contain '..'", field, p)
		}
	}
	return nil
}

// noNUL refuses a NUL byte in a string that becomes a C string (a path,
// an argument, an environment entry): the kernel would cut it there.
func noNUL(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return errdefs.InvalidArgument("%s: %q contains a NUL byte", field, s)
	}
	return nil
}

// namespacedSysctls are the sysctls a pod may set (the kubelet's
// namespaced list): IPC ones and the whole net.* tree.
var namespacedSysctls = map[string]bool{
	"kernel.shm_rmid_forced": true, "kernel.shmmax": true, "kernel.shmall": true, "kernel.shmmni": true,
	"kernel.msgmax": true, "kernel.msgmnb": true, "kernel.msgmni": true, "kernel.sem": true,
}

// validSysctls checks a sandbox's sysctls: namespaced ones only, and none
// of a namespace the pod shares with the node (setting it would change the
// node's: the kubelet refuses them, and runc would for a container).
func validSysctls(sysctls map[string]string, hostNetwork, hostIPC bool) error {
	for k := range sysctls {
		name := strings.ReplaceAll(k, "/", ".")
		if name == "" || strings.Contains(name, "..") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
			return errdefs.InvalidArgument("config.linux.sysctls: %q is not a sysctl name", k)
		}
		switch {
		case strings.HasPrefix(name, "net."):
			if hostNetwork {
				return errdefs.InvalidArgument("config.linux.sysctls: %q would be set on the node: the pod uses the node's network namespace", k)
			}
		case namespacedSysctls[name] || strings.HasPrefix(name, "fs.mqueue."):
			if hostIPC {
				return errdefs.InvalidArgument("config.linux.sysctls: %q would be set on the node: the pod uses the node's IPC namespace", k)
			}
		default:
			return errdefs.InvalidArgument("config.linux.sysctls: %q is not a namespaced sysctl (allowed: net.*, fs.mqueue.*, kernel.shm*, kernel.msg*, kernel.sem)", k)
		}
	}
	return nil
}
