package env

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Expand implements Kubernetes $(VAR) expansion
// (k8s.io/kubernetes third_party/forked/golang/expansion), scanning left to
// right, once:
//
//   - $(VAR) becomes VAR's value when mapping defines it, and stays as
//     written when it does not; VAR is everything up to the next ')', so
//     "$(A$(B)" asks for "A$(B";
//   - $$ becomes $ (so $$(VAR) is the literal text $(VAR));
//   - a $ followed by anything else, a trailing $, and an unclosed "$(" are
//     kept as they are.
//
// Replacement values are not rescanned, so expansion is single-pass and the
// result is not a fixed point: "$$$$" → "$$", and expanding that again gives
// "$". A nil mapping defines nothing.
//
// Bytes other than the syntax above are copied untouched. Upstream copies the
// rune after a lone $ through string(rune) since kubernetes#136325 (before
// it, a multi-byte rune there was corrupted); that agrees with this for valid
// UTF-8, and here invalid bytes are kept rather than turned into U+FFFD.
func Expand(s string, mapping func(string) (string, bool)) string {
	i := strings.IndexByte(s, '$')
	if i < 0 {
		return s // the common case: no allocation
	}
	var b strings.Builder
	done := 0 // s[:done] has been written to b
	for ; i < len(s)-1; i++ {
		if s[i] != '$' {
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteString(s[done : i+1]) // up to and including the first $
			i++
			done = i + 1
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unclosed: keep "$(" and scan on after it. No ')' follows,
				// so no later "$(" can close either.
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if mapping != nil {
				if v, ok := mapping(name); ok {
					b.WriteString(s[done:i])
					b.WriteString(v)
					done = i + 3 + end
				}
			}
			i += 2 + end // an undefined reference stays as written
		}
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// ExpandCommand is the kubelet's ExpandContainerCommandAndArgs: $(VAR) in
// the container's command and args, against the environment the kubelet hands
// the runtime. That is every env except the image's (the CRI runtime adds
// those later, so the kubelet never sees them): a command can reference a
// device plugin's variable, but not the image's PATH. Where a name is defined
// twice, the last definition in env counts, as in the kubelet's EnvVarsToMap;
// Result.Env has one entry per name, so that is the merged value. Empty
// command or args give nil, as in the kubelet.
func ExpandCommand(c *corev1.Container, env []Var) (command, args []string) {
	vars := make(map[string]string, len(env))
	for _, v := range env {
		if v.Source != SourceImage {
			vars[v.Name] = v.Value
		}
	}
	mapping := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for _, s := range c.Command {
		command = append(command, Expand(s, mapping))
	}
	for _, s := range c.Args {
		args = append(args, Expand(s, mapping))
	}
	return command, args
}
