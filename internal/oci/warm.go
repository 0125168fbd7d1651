package oci

import (
	"encoding/json"

	"github.com/opencontainers/runc/libcontainer"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// WarmJSON builds encoding/json's per-type encoders and field tables for
// what a container start encodes and decodes: the OCI spec, libcontainer's
// config (sent to the init) and its state (state.json). Built on first
// use they cost a process's first start about a millisecond of CPU; a
// process that waits for its work (the shim, for its first request)
// builds them while it waits.
func WarmJSON(more ...any) {
	for _, v := range append([]any{&specs.Spec{}, &libcontainer.State{}}, more...) {
		_, _ = json.Marshal(v)
	}
}
