package manifest

import (
	"strings"
	"testing"
)

func TestVarRefs(t *testing.T) {
	base := "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: a\n    image: busybox\n"
	cases := []struct{ extra, want string }{
		{`    env: [{name: A, value: "$(FOO"}]`, "spec.containers[0].env[0].value: Invalid value: \"$(FOO\": unterminated"},
		{`    env: [{name: A, value: "x$()"}]`, "spec.containers[0].env[0].value: Invalid value: \"x$()\": empty"},
		{`    command: ["sh", "-c", "echo $(B"]`, "spec.containers[0].command[2]: Invalid value"},
		{`    args: ["$(X)", "$(Y"]`, "spec.containers[0].args[1]: Invalid value"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(base + tc.extra + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.extra, err, tc.want)
		}
	}
	for _, ok := range []string{`    env: [{name: A, value: "$$(FOO"}]`, `    args: ["$(X)", "$$", "a$b", "$"]`, `    command: ["echo", "$(HOME)/x"]`} {
		if _, err := Parse([]byte(base + ok + "\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
