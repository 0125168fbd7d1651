package e2e

import (
	"strings"
	"testing"
)

// TestUnknownSubcommandExitsNonZero runs the binary the way a script does:
// an unknown subcommand of a group fails with a non-zero exit and prints
// no help on stdout, where a script would read it as the command's output.
// (cmd/podlab's tests walk every group of the tree; no root needed.)
func TestUnknownSubcommandExitsNonZero(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		unknown string
	}{
		{[]string{"image", "push", "busybox"}, "push"},
		{[]string{"completion", "tcsh"}, "tcsh"},
		{[]string{"help", "image", "push"}, "push"},
	} {
		r := podlab(t, "", tc.args...)
		want := `unknown command "` + tc.unknown + `"`
		if r.code == 0 || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Errorf("podlab %s: exit %d, stderr %q, stdout %q; want a non-zero exit naming %s", strings.Join(tc.args, " "), r.code, r.stderr, r.stdout, want)
		}
	}
}
