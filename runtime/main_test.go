package runtime

import (
	"testing"

	"github.com/podlab/podlab/test/podtest"
)

// The test binary stands in for podlab: the libcontainer init, the shim and
// the createContainer hook re-execute it (see podtest).
func TestMain(m *testing.M) { podtest.Main(m) }
