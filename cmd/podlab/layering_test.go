package main

import (
	"os/exec"
	"strings"
	"testing"
)

// cmd/ parses flags and prints: it reaches pods through the runtime's CRI
// operations and the kubelet half, never through the state store.
func TestCmdImportsNoStateStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == "github.com/podlab/podlab/internal/state" {
			t.Errorf("cmd/podlab imports %s", imp)
		}
	}
}
