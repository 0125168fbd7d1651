// Command leakcheck lists what podlab and its tests left on this host, a
// "leak: …" line each (see internal/leakcheck), and exits 1 if it found
// anything, 2 if it could not look everywhere. As root:
//
//	go run ./test/leakcheck [-settle 5s] [-dir DIR]...
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/podlab/podlab/internal/leakcheck"
)

func main() {
	h := leakcheck.Default()
	settle := flag.Duration("settle", 5*time.Second, "how long to wait for veths the kernel still destroys")
	flag.Func("dir", "also report mounts at or below `DIR` (a state or image dir of your config; repeatable)", func(d string) error {
		h.MountDirs = append(h.MountDirs, d)
		return nil
	})
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	leaks, err := h.CheckSettled(*settle)
	for _, l := range leaks {
		fmt.Println("leak:", l)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "leakcheck:", err)
		os.Exit(2)
	case len(leaks) > 0:
		os.Exit(1)
	}
}
