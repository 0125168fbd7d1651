package runtime

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/sandbox"
)

// A container created through the server is named by later calls without
// a read of the store; once removed, the store answers again (here: not
// found, as the store is empty).
func TestCallLogRemembersCreatedContainers(t *testing.T) {
	store, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := (&Runtime{Sandbox: &sandbox.Manager{Store: store}}).NewCallLog()
	const podID, ctrID = "p1", "c1"
	create := &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
	l.After("CreateContainer", callOn{pod: podID}, create, &runtimeapi.CreateContainerResponse{ContainerId: ctrID}, time.Now(), 0, nil)

	status := &runtimeapi.ContainerStatusRequest{ContainerId: ctrID}
	if got, want := l.Before("ContainerStatus", status), (callOn{pod: podID, container: "app"}); got != want {
		t.Errorf("Before(ContainerStatus) = %+v, want %+v", got, want)
	}
	remove := &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}
	l.After("RemoveContainer", l.Before("RemoveContainer", remove), remove, &runtimeapi.RemoveContainerResponse{}, time.Now(), 0, nil)
	if got := l.Before("ContainerStatus", status); got != (callOn{}) {
		t.Errorf("Before(ContainerStatus) after removal = %+v, want nothing", got)
	}
}
