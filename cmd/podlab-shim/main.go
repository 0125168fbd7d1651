// Command podlab-shim is the per-pod container monitor that `podlab run`
// starts (see runtime/shim). It is a binary of its own so that the binary
// libcontainer re-executes as each container's init is small: podlab's
// own (k8s API types, CRI, CNI, cobra) would cost every container start
// its size and package init.
package main

import (
	"os"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/runtime/shim"
)

func init() { oci.Init() } // the libcontainer init re-exec enters here

func main() { os.Exit(shim.Main(os.Args[1:])) }
