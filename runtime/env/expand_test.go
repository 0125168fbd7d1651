package env

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func mapping(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// The cases of upstream's expand_test.go that matter, plus the edges.
func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A":     "A",
		"VAR_B":     "B",
		"VAR_C":     "C",
		"VAR_REF":   "$(VAR_A)",
		"VAR_EMPTY": "",
		"":          "empty-name",
		"A$(B":      "odd",
	}
	tests := []struct {
		name, in, want string
	}{
		{"whole string", "$(VAR_A)", "A"},
		{"start", "$(VAR_A)-x", "A-x"},
		{"middle", "x-$(VAR_A)-y", "x-A-y"},
		{"end", "x-$(VAR_A)", "x-A"},
		{"twice", "$(VAR_A)_$(VAR_A)", "A_A"},
		{"adjacent", "$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"},
		{"value not rescanned", "$(VAR_REF)", "$(VAR_A)"},
		{"empty value", "x$(VAR_EMPTY)y", "xy"},
		{"empty name", "$()", "empty-name"},
		{"undefined", "$(UNDEFINED)", "$(UNDEFINED)"},
		{"undefined among defined", "$(VAR_A)$(UNDEFINED)$(VAR_B)", "A$(UNDEFINED)B"},
		{"escape", "$$(VAR_A)", "$(VAR_A)"},
		{"escape then reference", "$$$(VAR_A)", "$A"},
		{"double escape", "$$$$(VAR_A)", "$$(VAR_A)"},
		{"escaped dollar alone", "$$", "$"},
		{"four dollars", "$$$$", "$$"},
		{"three dollars", "$$$", "$$"},
		{"lone dollar", "$", "$"},
		{"trailing dollar", "foo$", "foo$"},
		{"dollar letter", "$VAR_A", "$VAR_A"},
		{"dollar space", "a $ b", "a $ b"},
		{"dollar brace", "${VAR_A}", "${VAR_A}"},
		{"unclosed", "$(VAR_A", "$(VAR_A"},
		{"unclosed then escape", "$(VAR_A$$", "$(VAR_A$"},
		{"unclosed then reference", "$(x $(VAR_A", "$(x $(VAR_A"},
		{"name runs to the first paren", "$(A$(B)", "odd"},
		{"closer without opener", "VAR_A)", "VAR_A)"},
		{"backslash is not an escape", `\$(VAR_A)`, `\A`},
		{"multi-byte rune after dollar", "$é$(VAR_A)", "$éA"},
		{"cjk", "价格$元$(VAR_B)", "价格$元B"},
		{"invalid utf-8 after dollar is kept", "$\xff$(VAR_C)", "$\xffC"},
		{"no dollar", "plain text", "plain text"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expand(tt.in, mapping(vars)); got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if utf8.ValidString(tt.in) {
				if got := model(tt.in, mapping(vars)); got != tt.want {
					t.Errorf("model(%q) = %q, want %q", tt.in, got, tt.want)
				}
			}
		})
	}
}

// Expansion is one pass, so it is not idempotent, even with nothing defined:
// "$$" is consumed each time.
func TestExpandIsNotIdempotent(t *testing.T) {
	for _, tt := range []struct {
		in          string
		vars        map[string]string
		once, twice string
	}{
		{"$$$$", nil, "$$", "$"},
		{"$$(A)", nil, "$(A)", "$(A)"},
		{"$$(A)", map[string]string{"A": "x"}, "$(A)", "x"},
		{"$(A)", map[string]string{"A": "$(A)$(A)"}, "$(A)$(A)", "$(A)$(A)$(A)$(A)"},
	} {
		m := mapping(tt.vars)
		once := Expand(tt.in, m)
		twice := Expand(once, m)
		if once != tt.once || twice != tt.twice {
			t.Errorf("Expand(%q) = %q, then %q; want %q, then %q", tt.in, once, twice, tt.once, tt.twice)
		}
	}
	if got := Expand("$(A)", nil); got != "$(A)" {
		t.Errorf("Expand with nil mapping = %q", got)
	}
}

func TestExpandCommand(t *testing.T) {
	env := []Var{
		img("PATH", "/bin"),
		gpu("NVIDIA_VISIBLE_DEVICES", "0"),
		ctr("GREETING", "hello", "env[0]"),
	}
	tests := []struct {
		name              string
		command, args     []string
		wantCmd, wantArgs []string
	}{
		{
			name:     "command and args",
			command:  []string{"/bin/sh", "-c", "echo $(GREETING) $(NVIDIA_VISIBLE_DEVICES) $$(GREETING)"},
			args:     []string{"$(MISSING)", "--gpus=$(NVIDIA_VISIBLE_DEVICES)"},
			wantCmd:  []string{"/bin/sh", "-c", "echo hello 0 $(GREETING)"},
			wantArgs: []string{"$(MISSING)", "--gpus=0"},
		},
		{
			name:    "image env is not visible",
			command: []string{"$(PATH)/app"},
			wantCmd: []string{"$(PATH)/app"},
		},
		{
			name: "nothing",
		},
		{
			name:     "args only",
			args:     []string{"$(GREETING)"},
			wantArgs: []string{"hello"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{Name: "app", Command: tt.command, Args: tt.args}
			cmd, args := ExpandCommand(c, env)
			if diff := cmp.Diff(tt.wantCmd, cmd); diff != "" {
				t.Errorf("command mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantArgs, args); diff != "" {
				t.Errorf("args mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// ExpandCommand on a Build result sees the value the policy kept.
func TestExpandCommandAfterPolicy(t *testing.T) {
	for policy, want := range map[string]string{PolicyKubelet: "--gpus=all", PolicyPlatformWins: "--gpus=0"} {
		pod := testPod(corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
		pod.Spec.Containers[0].Args = []string{"--gpus=$(NVIDIA_VISIBLE_DEVICES)"}
		in := input(pod)
		in.DevicePlugin = []Var{gpu("NVIDIA_VISIBLE_DEVICES", "0")}
		in.Policy = policy
		r := mustBuild(t, in)
		if _, args := ExpandCommand(in.Container, r.Env); len(args) != 1 || args[0] != want {
			t.Errorf("%s: args = %q, want %q", policy, args, want)
		}
	}
}

// model is an independent, token-at-a-time statement of the upstream
// algorithm after kubernetes#136325, including its string(rune) copy of the
// rune after a lone $ (which turns an invalid byte there into U+FFFD).
func model(s string, m func(string) (string, bool)) string {
	var out strings.Builder
	for len(s) > 0 {
		if s[0] != '$' || len(s) == 1 {
			_, n := utf8.DecodeRuneInString(s)
			out.WriteString(s[:n])
			s = s[n:]
			continue
		}
		switch s[1] {
		case '$':
			out.WriteByte('$')
			s = s[2:]
		case '(':
			j := strings.IndexByte(s[2:], ')')
			if j < 0 {
				out.WriteString("$(")
				s = s[2:]
				continue
			}
			name := s[2 : 2+j]
			if v, ok := m(name); ok {
				out.WriteString(v)
			} else {
				out.WriteString("$(" + name + ")")
			}
			s = s[3+j:]
		default:
			r, n := utf8.DecodeRuneInString(s[1:])
			out.WriteString("$" + string(r))
			s = s[1+n:]
		}
	}
	return out.String()
}

// escape makes s expand to itself: every $ doubled.
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// FuzzExpand checks properties that hold for the kubelet's algorithm.
// Idempotence is not one of them (see TestExpandIsNotIdempotent); these are:
//   - it never panics;
//   - on valid UTF-8 it agrees with model, a separate statement of upstream;
//   - escaping round-trips: Expand(escape(s), m) == s for any mapping m;
//   - with nothing defined, a string without "$$" is returned unchanged, and
//     no output is longer than its input (only "$$" → "$" changes anything);
//   - a reference between escaped text expands to exactly its value;
//   - with nothing defined, every "$(" in the input survives ("$$(" turns
//     into "$(", an undefined or unclosed reference is kept).
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "$", "$$", "$$$", "$(A)", "$$(A)", "$(A", "$(A$(B)", "a$b", "$é", "$\xff", "$()", "x$(A)y$(B)z", ")("} {
		f.Add(s, "A", "value")
	}
	f.Fuzz(func(t *testing.T, s, name, value string) {
		defined := func(n string) (string, bool) {
			if n == name {
				return value, true
			}
			return "<" + n + ">", true
		}
		undefined := func(string) (string, bool) { return "", false }

		got := Expand(s, defined)
		if utf8.ValidString(s) {
			if want := model(s, defined); got != want {
				t.Fatalf("Expand(%q) = %q, model says %q", s, got, want)
			}
		}
		out := Expand(s, undefined)
		if got := Expand(s, nil); got != out {
			t.Fatalf("nil mapping %q != undefined mapping %q", got, out)
		}
		if len(out) > len(s) {
			t.Fatalf("Expand(%q) with nothing defined grew to %q", s, out)
		}
		if !strings.Contains(s, "$$") && out != s {
			t.Fatalf("Expand(%q) with nothing defined = %q, want it unchanged", s, out)
		}
		if n, m := strings.Count(s, "$("), strings.Count(out, "$("); m < n {
			t.Fatalf("Expand(%q) with nothing defined lost a reference: %q", s, out)
		}
		if got := Expand(escape(s), defined); got != s {
			t.Fatalf("Expand(escape(%q)) = %q", s, got)
		}
		if !strings.Contains(name, ")") {
			in := escape(s) + "$(" + name + ")" + escape(value)
			if got, want := Expand(in, defined), s+value+value; got != want {
				t.Fatalf("Expand(%q) = %q, want %q", in, got, want)
			}
		}
	})
}
