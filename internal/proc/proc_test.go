package proc

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// comm may hold spaces and parens; fields are counted after the last ')'.
	data := []byte("4242 (a) (b c) S 17 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 1000 100 18446744073709551615\n")
	st, err := ParseStat(data)
	if err != nil {
		t.Fatal(err)
	}
	if st != (StatFields{State: 'S', PPID: 17, Start: 98765}) {
		t.Errorf("ParseStat = %+v", st)
	}
	for _, bad := range []string{"", "4242 (a S 17", "4242 (a) S 17 1 2", "4242 (a) S x 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1 1"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestStatSelf(t *testing.T) {
	state, start, err := Stat(os.Getpid())
	if err != nil || state != 'R' && state != 'S' || start == 0 {
		t.Errorf("Stat(self) = %c, %d, %v", state, start, err)
	}
}
