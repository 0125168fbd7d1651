package rootfs

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// The expressions the validators in grammar.go stand for: distribution/
// reference's grammar and a docker save's blob paths. Each validator must
// answer as its expression does, on every input.
var (
	pathComponentRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$`)
	domainRE        = regexp.MustCompile(`^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	tagRE           = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	blobNameRE      = regexp.MustCompile(`^blobs/(sha256|sha384|sha512)/([a-f0-9]+)$`)
)

// checkGrammar fails t wherever a validator and its expression disagree on s.
func checkGrammar(t *testing.T, s string) {
	t.Helper()
	if got, want := validPathComponent(s), pathComponentRE.MatchString(s); got != want {
		t.Errorf("validPathComponent(%q) = %v, the expression says %v", s, got, want)
	}
	if got, want := validDomain(s), domainRE.MatchString(s); got != want {
		t.Errorf("validDomain(%q) = %v, the expression says %v", s, got, want)
	}
	if got, want := validTag(s), tagRE.MatchString(s); got != want {
		t.Errorf("validTag(%q) = %v, the expression says %v", s, got, want)
	}
	alg, enc, ok := parseBlobName(s)
	m := blobNameRE.FindStringSubmatch(s)
	if ok != (m != nil) || (ok && (alg != m[1] || enc != m[2])) {
		t.Errorf("parseBlobName(%q) = %q, %q, %v; the expression says %q", s, alg, enc, ok, m)
	}
}

func TestGrammarMatchesExpressions(t *testing.T) {
	for _, s := range []string{
		"", "a", "A", "0", "_", "-", ".", ":", "[", "]", "[]", "[:]", "[::1]", "[::1]:5000", "[::1]:", "[::1]x", "[g::1]", "[a]b]",
		"busybox", "library", "a.b", "a..b", "a_b", "a__b", "a___b", "a-b", "a--b", "a---b", "a.-b", "a-.b", "-a", "a-", ".a", "a.", "_a", "a_",
		"Busybox", "docker.io", "registry.k8s.io", "127.0.0.1", "127.0.0.1:5000", "localhost", "localhost:5000", "host:", ":5000", "host:50a0", "a:1:2",
		"my-registry.example.com:443", "-bad.example.com", "bad-.example.com", "a..example.com", "exa_mple.com", "xn--bcher-kva.example",
		"latest", "1.29-2", "v1.0.0", "_tag", ".tag", "-tag", "tag!", "tag/x", string(make([]byte, 129)),
		"blobs/sha256/abc", "blobs/sha256/ABC", "blobs/sha256/", "blobs/md5/abc", "blobs/sha256/abc/def", "blobs//abc", "xblobs/sha256/abc", "blobs/sha512/0123456789abcdef",
	} {
		checkGrammar(t, s)
	}
	long := "a"
	for range 127 {
		long += "b"
	}
	checkGrammar(t, long)     // 128: the longest tag
	checkGrammar(t, long+"c") // 129
	// Random strings over the characters the grammars care about.
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aZ09._-:[]/bs"
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		checkGrammar(t, string(b))
	}
}

func FuzzGrammar(f *testing.F) {
	for _, s := range []string{"busybox", "registry.k8s.io:443", "[::1]:5000", "1.29-2", "blobs/sha256/ab12", "a__b-c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkGrammar(t, s) })
}
