package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports how far the run is: on a terminal a bar redrawn in
// place with \r, otherwise (logs, CI) one line per 10%.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time

	mu     sync.Mutex
	done   int
	failed int
	label  string
	decile int
	last   time.Time
}

func newProgress(w io.Writer, tty bool, total int) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w, tty: tty, total: max(total, 1), start: time.Now()}
}

// phase names what the next steps are (e.g. "c=4 live=10").
func (p *progress) phase(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label = label
	p.draw(true)
	p.mu.Unlock()
}

// step counts one finished unit of work (a cycle, a live pod start).
func (p *progress) step(failed bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.done++
	if failed {
		p.failed++
	}
	p.draw(false)
	p.mu.Unlock()
}

func (p *progress) draw(force bool) {
	pct := p.done * 100 / p.total
	if !p.tty {
		if d := pct / 10; d > p.decile || (force && p.done == 0) {
			p.decile = d
			fmt.Fprintf(p.w, "bench: %3d%% %d/%d %s, %d failed, %s\n", pct, p.done, p.total, p.label, p.failed, time.Since(p.start).Round(100*time.Millisecond))
		}
		return
	}
	// Redraw at most every 50 ms: a terminal is slower than a fast cycle.
	if !force && p.done < p.total && time.Since(p.last) < 50*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	n := p.done * width / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %3d%% %d/%d %-14s %d failed %s\x1b[K",
		strings.Repeat("=", n), strings.Repeat(" ", width-n), pct, p.done, p.total, p.label, p.failed, time.Since(p.start).Round(100*time.Millisecond))
}

// finish ends the bar's line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.draw(true)
		fmt.Fprintln(p.w)
	}
}
