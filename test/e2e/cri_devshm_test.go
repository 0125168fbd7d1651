package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIPodDevShm: the containers of a pod share its /dev/shm, a 64 MiB
// tmpfs that the pod mounts and takes away when it stops, as containerd's
// sandbox shm; a container in the node's IPC namespace has the node's.
func TestCRIPodDevShm(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")

	podID, cfgPath := s.runPod(t, s.podConfig("shm", "e2e-shm", nil))
	shm := podDevShm(t, podID)
	if len(shm) != 1 || shm[0].FSType != "tmpfs" || !strings.Contains(shm[0].VFSOptions, "size=65536k") {
		t.Fatalf("the pod's /dev/shm on the host: %+v, want one tmpfs of 65536k", shm)
	}
	writer := s.createCtr(t, podID, cfgPath, ctrConfig("writer", "sh", "-c", "echo shared > /dev/shm/x; sleep 600"))
	reader := s.createCtr(t, podID, cfgPath, ctrConfig("reader", "sleep", "600"))
	nodeIPC := &pb.NamespaceOption{Network: pb.NamespaceMode_POD, Pid: pb.NamespaceMode_CONTAINER, Ipc: pb.NamespaceMode_NODE}
	node := s.createCtr(t, podID, cfgPath, ctrWithNS("node", nodeIPC, "sleep", "600"))
	for _, id := range []string{writer, reader, node} {
		s.crictlOK(t, "start", id)
		s.waitCtrState(t, id, "CONTAINER_RUNNING")
	}
	for deadline := time.Now().Add(10 * time.Second); strings.TrimSpace(s.crictl("exec", "-s", writer, "cat", "/dev/shm/x").stdout) != "shared"; {
		if time.Now().After(deadline) {
			t.Fatal("the writer's /dev/shm/x did not appear")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := s.crictlOK(t, "exec", "-s", reader, "cat", "/dev/shm/x"); got != "shared" {
		t.Errorf("another container of the pod reads %q in /dev/shm/x, want the writer's \"shared\"", got)
	}
	if data, err := os.ReadFile(filepath.Join(shm[0].Mountpoint, "x")); err != nil || strings.TrimSpace(string(data)) != "shared" {
		t.Errorf("the pod's /dev/shm on the host holds x = %q (%v)", data, err)
	}
	// One /dev/shm mount in the container: the bind, without the default
	// spec's tmpfs under it.
	if mounts := s.crictlOK(t, "exec", "-s", reader, "grep", " /dev/shm ", "/proc/self/mounts"); strings.Count(mounts, "\n") != 0 {
		t.Errorf("the container has more than one mount at /dev/shm:\n%s", mounts)
	}

	// The node's IPC namespace, the node's /dev/shm.
	marker, err := os.CreateTemp("/dev/shm", "podlab-e2e-*")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	t.Cleanup(func() { os.Remove(marker.Name()) })
	if r := s.crictl("exec", "-s", node, "test", "-e", marker.Name()); r.code != 0 {
		t.Errorf("a container in the node's IPC namespace does not see %s in /dev/shm: exit %d %s", marker.Name(), r.code, r.stderr)
	}
	if r := s.crictl("exec", "-s", node, "test", "-e", "/dev/shm/x"); r.code == 0 {
		t.Error("a container in the node's IPC namespace sees the pod's /dev/shm")
	}

	s.crictlOK(t, "stopp", podID)
	if shm := podDevShm(t, podID); len(shm) != 0 {
		t.Errorf("the pod's /dev/shm is still mounted after StopPodSandbox: %+v", shm)
	}
	s.crictlOK(t, "rmp", podID)
}

// podDevShm finds the host's mounts of pod podID's /dev/shm.
func podDevShm(t *testing.T, podID string) []*mountinfo.Info {
	t.Helper()
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasSuffix(m.Mountpoint, "/pods/"+podID+"/shm"), false
	})
	if err != nil {
		t.Fatal(err)
	}
	return mounts
}
