// Command podlab builds Kubernetes pod sandboxes on one Linux host, stage by
// stage, and times every stage.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/runtime"
)

func init() {
	// libcontainer re-executes this binary as `podlab init` inside each new
	// container; that must be handled before cobra or anything else runs.
	oci.Init()
}

// exitError carries a specific exit code (exec, verify).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	runtime.Version = version
	tuneForShortCommand()
	if err := newRootCmd().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
