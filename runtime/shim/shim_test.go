package shim

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestCRILogFormat checks the kubelet's log format: "<RFC3339Nano> <stream>
// <F|P> <content>", lines over maxLine split into partial records that
// rejoin to the original, and a last line without newline kept.
func TestCRILogFormat(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	w := &criLogWriter{f: f}
	long := strings.Repeat("x", maxLine+10)
	w.copyStream("stdout", strings.NewReader("one\ntwo\n"+long+"\nlast"))
	f.Close()
	data, _ := os.ReadFile(f.Name())
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), data)
	}
	var joined strings.Builder
	for i, wantTag := range []string{"F", "F", "P", "F", "F"} {
		parts := strings.SplitN(lines[i], " ", 4)
		if len(parts) != 4 {
			t.Fatalf("line %d: %q", i, lines[i])
		}
		if _, err := time.Parse(time.RFC3339Nano, parts[0]); err != nil {
			t.Errorf("line %d: timestamp: %v", i, err)
		}
		if parts[1] != "stdout" || parts[2] != wantTag {
			t.Errorf("line %d: stream %q tag %q, want stdout %s", i, parts[1], parts[2], wantTag)
		}
		joined.WriteString(parts[3])
		if parts[2] == "F" {
			joined.WriteString("\n")
		}
	}
	if joined.String() != "one\ntwo\n"+long+"\nlast\n" {
		t.Errorf("records do not rejoin to the input (%d bytes)", joined.Len())
	}
}
