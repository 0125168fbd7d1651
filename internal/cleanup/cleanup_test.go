package cleanup

import (
	"errors"
	"strings"
	"testing"
)

func TestRunIsLIFOAndKeepsGoing(t *testing.T) {
	var l List
	var order []string
	l.Add("first", func() error { order = append(order, "first"); return nil })
	l.Add("second", func() error { order = append(order, "second"); return errors.New("boom") })
	l.Add("third", func() error { order = append(order, "third"); return nil })
	err := l.Run()
	if strings.Join(order, ",") != "third,second,first" {
		t.Fatalf("order = %v", order)
	}
	if err == nil || !strings.Contains(err.Error(), "second: boom") {
		t.Fatalf("err = %v", err)
	}
	if err := l.Run(); err != nil {
		t.Fatalf("second Run = %v", err)
	}
}
