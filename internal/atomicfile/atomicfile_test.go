package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// writers are the two ways to replace a file: they differ only in the sync.
var writers = map[string]func(string, []byte, os.FileMode) error{"WriteFile": WriteFile, "WriteVolatile": WriteVolatile}

func TestWriteFile(t *testing.T) {
	old := syscall.Umask(0o077) // perm must not depend on the umask
	defer syscall.Umask(old)
	for name, write := range writers {
		t.Run(name, func(t *testing.T) { testWrite(t, write) })
	}
}

func testWrite(t *testing.T, write func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, tt := range []struct {
		data string
		perm os.FileMode
	}{{"one", 0o644}, {"two", 0o600}, {"three", 0o640}} {
		if err := write(path, []byte(tt.data), tt.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tt.data {
			t.Fatalf("content %q, %v; want %q", got, err, tt.data)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tt.perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), tt.perm)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("dir holds %v (%v), want f.json only", entries, err)
	}
}

func TestWriteFileErrorLeavesNothing(t *testing.T) {
	for name, write := range writers {
		t.Run(name, func(t *testing.T) { testErrorLeavesNothing(t, write) })
	}
}

func testErrorLeavesNothing(t *testing.T, write func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Renaming a file over a non-empty directory fails.
	if err := write(path, []byte("x"), 0o644); err == nil {
		t.Fatal("replacing a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %v, want d only (temp file removed)", entries)
	}
	if err := write(filepath.Join(dir, "missing", "f"), nil, 0o644); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}
