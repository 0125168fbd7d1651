package runtime

import (
	"encoding/json"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/shim"
)

// Warm builds, ahead of need, the per-type tables that a pod's first CRI
// operations in this process would otherwise build on the pod's critical
// path: protobuf's message info for a ContainerConfig (cloned by
// CreateContainer) and encoding/json's encoders for the records and
// layers written, about 2.5 ms of CPU in all. A short-lived process that
// creates a pod (`podlab run`) calls it in a goroutine at its start, while
// it parses the manifest and the sandbox's stages wait on CNI plugins and
// the pause; the long-lived shim does the same for its side (oci.WarmJSON).
func Warm() {
	for _, m := range []proto.Message{&runtimeapi.ContainerConfig{}, &runtimeapi.PodSandboxConfig{}} {
		fill(m.ProtoReflect(), map[protoreflect.FullName]bool{})
		_ = proto.Clone(m)
		_, _ = json.Marshal(m)
	}
	oci.WarmJSON(&Layers{}, &state.Pod{}, &shim.CreateRequest{}, &shim.CreateResponse{})
}

// fill sets every message field of m (and one element of every list of
// messages) to a message filled the same way, once per message type, so a
// clone of m visits every message type a request can hold.
func fill(m protoreflect.Message, seen map[protoreflect.FullName]bool) {
	if seen[m.Descriptor().FullName()] {
		return
	}
	seen[m.Descriptor().FullName()] = true
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		switch {
		case f.Message() == nil || f.IsMap():
		case f.IsList():
			fill(m.Mutable(f).List().AppendMutable().Message(), seen)
		default:
			fill(m.Mutable(f).Message(), seen)
		}
	}
}
