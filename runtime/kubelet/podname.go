package kubelet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/flock"
)

// The kubelet half plays the API server's part for `podlab run`: a pod's
// namespace/name belongs to one pod (one uid) at a time. The runtime keys
// its sandboxes by uid as well, as containerd does, so that a real
// kubelet may make a pod again under its name while the old uid's sandbox
// is torn down; two `podlab run`s of one manifest get two uids, and it is
// this claim that refuses the second.
//
// A claim is a file names/<namespace>_<name> holding the uid, read and
// written under its flock. It is live while that uid's kubelet pod dir
// exists: a claim whose run died before making the dir, or after removing
// it, is taken over.

func (k *Kubelet) namePath(namespace, name string) string {
	// "_" cannot occur in a namespace (a DNS label).
	return filepath.Join(k.Config.StateDir, "kubelet", "names", namespace+"_"+name)
}

// makePodDir makes pod's kubelet dir, claiming its name first. The uid
// names the dir, as the API server keeps it unique: a second pod with the
// same uid (a manifest that sets one, run twice) must not share, nor on
// rollback remove, the first's.
func (k *Kubelet) makePodDir(pod *corev1.Pod) (string, error) {
	f, err := lockFile(k.namePath(pod.Namespace, pod.Name))
	if err != nil {
		return "", fmt.Errorf("claiming pod name: %w", err)
	}
	defer f.Close()
	if holder := readClaim(f); holder != "" && holder != string(pod.UID) && exists(k.PodDir(holder)) {
		return "", errdefs.AlreadyExists("pod %q already exists (uid %s)", pod.Namespace+"/"+pod.Name, holder)
	}
	podDir := k.PodDir(string(pod.UID))
	if err := os.MkdirAll(filepath.Dir(podDir), 0o700); err != nil {
		return "", err
	}
	if err := os.Mkdir(podDir, 0o700); errors.Is(err, os.ErrExist) {
		return "", errdefs.AlreadyExists("pod %s/%s: metadata.uid %s is another pod's (kubelet pod dir %s)", pod.Namespace, pod.Name, pod.UID, podDir)
	} else if err != nil {
		return "", fmt.Errorf("kubelet pod dir: %w", err)
	}
	if err := writeClaim(f, string(pod.UID)); err != nil {
		os.Remove(podDir)
		return "", fmt.Errorf("claiming pod name: %w", err)
	}
	return podDir, nil
}

// releaseName removes pod's name claim if it is still pod's.
func (k *Kubelet) releaseName(pod *corev1.Pod) error {
	path := k.namePath(pod.Namespace, pod.Name)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	f, err := lockFile(path)
	if err != nil {
		return fmt.Errorf("releasing pod name: %w", err)
	}
	defer f.Close()
	if readClaim(f) == string(pod.UID) {
		return os.Remove(path)
	}
	return nil
}

// pruneNames removes claims whose pod dir is gone (for GC).
func (k *Kubelet) pruneNames(dryRun bool) (pruned []string) {
	dir := filepath.Dir(k.namePath("x", "x"))
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		f, err := lockFile(path)
		if err != nil {
			continue
		}
		if uid := readClaim(f); uid == "" || !exists(k.PodDir(uid)) {
			if dryRun || os.Remove(path) == nil {
				pruned = append(pruned, strings.Replace(e.Name(), "_", "/", 1))
			}
		}
		f.Close()
	}
	return pruned
}

// lockFile takes the flock of path, making its directory first.
func lockFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return flock.Open(path, true)
}

// readClaim is the uid in a claim file; "" if empty or not a plain uid.
func readClaim(f *os.File) string {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 256))
	uid := strings.TrimSpace(string(b))
	if err != nil || uid == "" || strings.ContainsAny(uid, "/") || uid == "." || uid == ".." {
		return ""
	}
	return uid
}

func writeClaim(f *os.File, uid string) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(uid), 0)
	return err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
