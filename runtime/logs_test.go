package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyLogsRejoinsPartialLines reads a CRI log whose long line the shim
// split into partial (P) records.
func TestCopyLogsRejoinsPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	log := "2026-11-21T10:00:00.000000001Z stdout F one\n" +
		"2026-11-21T10:00:00.000000002Z stdout P abc\n" +
		"2026-11-21T10:00:00.000000003Z stdout F def\n" +
		"2026-11-21T10:00:00.000000004Z stderr F err\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if err := CopyLogs(path, &out, &errOut, false, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "one\nabcdef\n" || errOut.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}
