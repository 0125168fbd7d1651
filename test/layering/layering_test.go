// Package layering checks podlab's import layering with `go list`:
//
//   - nothing under internal/ imports runtime/… or sandbox/, directly or
//     through another package: internal/ holds leaf helpers only;
//   - nothing in netns/, rootfs/, sandbox/ or pause/ imports runtime/…,
//     directly or through another package (their tests may);
//   - nothing under cmd/ imports the state store (internal/state): cmd/
//     parses flags and prints, the runtime operations own the store;
//   - the CRI server (runtime/cri) imports no state store either: it is a
//     thin layer over the runtime operations;
//   - the spec builder (runtime/specgen) imports neither the runtime core nor
//     anything above it, nor the state store: it converts what it is
//     given.
//
// A unit test: no root needed.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
)

const module = "github.com/podlab/podlab"

type pkg struct {
	ImportPath   string
	Imports      []string // direct, non-test
	Deps         []string // transitive, non-test
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// under reports whether path is dir (relative to the module) or below it.
func under(path, dir string) bool {
	p := module + "/" + dir
	return path == p || strings.HasPrefix(path, p+"/")
}

// listPackages runs `go list -json ./...` at the module root.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...") // as the e2e tests build: go on PATH (the Makefile and .ci/run put it there)
	cmd.Dir = testutil.RepoRoot(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, errb.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// rule: the packages selected by from must not import any package matched
// by banned; transitive says whether to look at every dependency or only
// at direct imports (test imports are always looked at, directly).
type rule struct {
	name       string
	from       func(string) bool
	banned     func(string) bool
	transitive bool
	// codeOnly leaves test imports out: a runtime test may drive pods
	// through the kubelet half, as any client does.
	codeOnly bool
}

func TestLayering(t *testing.T) {
	pkgs := listPackages(t)
	for _, want := range []string{"internal/state", "cmd/podlab", "runtime", "runtime/cri", "runtime/kubelet", "runtime/specgen", "sandbox"} {
		if _, ok := pkgs[module+"/"+want]; !ok {
			t.Errorf("package %s not found: the rules below would hold vacuously", want)
		}
	}
	rules := []rule{
		{
			name:       "internal_imports_no_runtime_or_sandbox",
			from:       func(p string) bool { return under(p, "internal") },
			banned:     func(p string) bool { return under(p, "runtime") || under(p, "sandbox") },
			transitive: true,
		},
		{
			// The rooms below the runtime (namespaces, images, the sandbox)
			// take what they need of its config as data of their own.
			name: "below_runtime_imports_no_runtime",
			from: func(p string) bool {
				return under(p, "netns") || under(p, "rootfs") || under(p, "sandbox") || under(p, "pause")
			},
			banned:     func(p string) bool { return under(p, "runtime") },
			transitive: true,
			codeOnly:   true,
		},
		{
			name:   "cmd_imports_no_state_store",
			from:   func(p string) bool { return under(p, "cmd") },
			banned: func(p string) bool { return under(p, "internal/state") },
		},
		{
			// The kubelet half calls the runtime's CRI operations; the
			// runtime, its shim, the sandbox and the CRI server never
			// call back up into it (what they share is kubecontainer's).
			name: "runtime_imports_no_kubelet_half",
			from: func(p string) bool {
				return p == module+"/runtime" || under(p, "runtime/cri") || under(p, "runtime/shim") || under(p, "sandbox") || under(p, "rootfs")
			},
			banned:     func(p string) bool { return under(p, "runtime/kubelet") },
			transitive: true,
			codeOnly:   true,
		},
		{
			// The CRI → OCI conversion is a room of its own: the runtime
			// core hands it the config, the image and the sandbox, and it
			// never calls back into the handlers or reads their records.
			name: "specgen_imports_no_runtime_core",
			from: func(p string) bool { return under(p, "runtime/specgen") },
			banned: func(p string) bool {
				return p == module+"/runtime" || under(p, "runtime/shim") || under(p, "runtime/cri") ||
					under(p, "runtime/kubelet") || under(p, "runtime/bench") || under(p, "runtime/inspect") ||
					under(p, "internal/state") || under(p, "sandbox")
			},
			transitive: true,
			codeOnly:   true,
		},
		{
			name:   "cri_server_imports_no_state_store",
			from:   func(p string) bool { return under(p, "runtime/cri") },
			banned: func(p string) bool { return under(p, "internal/state") },
		},
	}
	var paths []string
	for p := range pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			checked := 0
			for _, path := range paths {
				if !r.from(path) {
					continue
				}
				checked++
				p := pkgs[path]
				imports := map[string]string{}
				for _, i := range p.Imports {
					imports[i] = "imports"
				}
				if r.transitive {
					for _, d := range p.Deps {
						if _, ok := imports[d]; !ok {
							imports[d] = "depends (indirectly) on"
						}
					}
				}
				for _, i := range p.TestImports {
					if r.codeOnly {
						break
					}
					if _, ok := imports[i]; !ok {
						imports[i] = "imports in its tests"
					}
				}
				for _, i := range p.XTestImports {
					if _, ok := imports[i]; !ok {
						imports[i] = "imports in its external tests"
					}
				}
				var bad []string
				for i, how := range imports {
					if r.banned(i) {
						bad = append(bad, how+" "+i)
					}
				}
				sort.Strings(bad)
				for _, b := range bad {
					t.Errorf("%s %s", path, b)
				}
			}
			if checked == 0 {
				t.Errorf("no package matched the rule")
			}
		})
	}
}
