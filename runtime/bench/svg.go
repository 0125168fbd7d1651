package bench

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The chart is hand-written SVG (no dependencies): panel 1 stacks each
// round's outer stages at their p50, in cycle order, with a whisker to each
// stage's p99 and markers for the measured full-cycle p50 and p99; panel 2
// is the latency-vs-live-pods curve at the first concurrency.

const (
	svgWidth   = 980
	svgLeft    = 120 // room for round labels
	svgRight   = 30
	barHeight  = 26
	barPitch   = 50
	legendRowH = 18
	legendCols = 4
	curveH     = 300
)

var (
	// Neighbouring stages alternate hue and lightness so small segments stay apart.
	runColors      = []string{"#1f77b4", "#aec7e8", "#2ca02c", "#98df8a", "#17becf", "#bcbd22", "#393b79", "#9edae5", "#637939", "#e7ba52", "#5254a3", "#cedb9c", "#8c6d31", "#9c9ede", "#b5cf6b", "#6b6ecf"}
	teardownColors = []string{"#d62728", "#ff9896", "#ff7f0e", "#ffbb78", "#9467bd", "#c5b0d5", "#e377c2", "#f7b6d2", "#8c564b", "#c49c94", "#e6550d", "#fd8d3c"}
	waitColor      = "#a0a0a0"
	otherColor     = "#e8e8e8"
)

type segment struct {
	stage, phase string
	p50, p99     int64
	color        string
}

// WriteSVG draws the report's chart.
func WriteSVG(w io.Writer, r *Report) error {
	var b bytes.Buffer
	rounds := chartRounds(r)
	colors := stageColors(rounds)

	// Bars: outer stages of run, wait and teardown, in order.
	bars := make([][]segment, len(rounds))
	var xmax int64 = 1
	for i, rd := range rounds {
		var sum int64
		for _, s := range rd.Stages {
			if !s.Outer || s.Phase == PhaseTotal {
				continue
			}
			bars[i] = append(bars[i], segment{s.Stage, s.Phase, s.P50Ns, s.P99Ns, colors[s.Stage]})
			xmax = max(xmax, sum+s.P99Ns)
			sum += s.P50Ns
		}
		xmax = max(xmax, sum)
		if c, ok := Find(rd.Stages, PhaseTotal, StageCycle); ok {
			xmax = max(xmax, c.P99Ns)
		}
	}
	axisMax, step := niceScale(float64(xmax) / 1e6)
	// The right 140 px hold the full-cycle labels beside their p99 ticks.
	plotW := float64(svgWidth - svgLeft - svgRight - 140)
	x := func(ns int64) float64 { return svgLeft + float64(ns)/1e6/axisMax*plotW }

	legend := legendEntries(rounds, colors)
	legendRows := (len(legend) + legendCols - 1) / legendCols
	top := 64.0
	barsBottom := top + float64(len(rounds))*barPitch
	legendTop := barsBottom + 56
	curveTop := legendTop + float64(legendRows)*legendRowH + 50
	height := curveTop + curveH + 20

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("podlab bench: %s, %d cycles per round (%s)", r.Pod, r.Cycles, r.Machine.CPUModel)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", 10, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">Per-stage p50, stacked in cycle order (run → wait → teardown); whiskers reach each stage's p99. ▲ and | : measured full-cycle p50 and p99.</text>`+"\n", 10)

	// Panel 1: grid and axis.
	fmt.Fprintf(&b, `<g id="stages">`+"\n")
	fmt.Fprintf(&b, `<g class="axis" stroke="#ddd">`+"\n")
	for v := 0.0; v <= axisMax+step/2; v += step {
		px := svgLeft + v/axisMax*plotW
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", px, top-6, px, barsBottom)
	}
	fmt.Fprintf(&b, "</g>\n")
	for v := 0.0; v <= axisMax+step/2; v += step {
		px := svgLeft + v/axisMax*plotW
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", px, barsBottom+14, trimFloat(v))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="start" fill="#555">ms</text>`+"\n", svgLeft+plotW+14, barsBottom+14)

	for i, rd := range rounds {
		y := top + float64(i)*barPitch
		fmt.Fprintf(&b, `<g class="bar" data-round="%s">`+"\n", esc(rd.Name))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-weight="bold">%s</text>`+"\n", svgLeft-8, y+barHeight/2-2, esc(roundLabel(rd)))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555" font-size="10">%.1f pods/s</text>`+"\n", svgLeft-8, y+barHeight/2+11, rd.PodsPerSec)
		var at int64
		for k, s := range bars[i] {
			x0, x1 := x(at), x(at+s.p50)
			fill := s.color
			fmt.Fprintf(&b, `<rect class="seg" x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s" stroke="white" stroke-width="0.5"><title>%s: p50 %s ms, p99 %s ms</title></rect>`+"\n",
				x0, y, math.Max(x1-x0, 0.5), barHeight, fill, esc(s.stage), ms(s.p50), ms(s.p99))
			if label := shortStage(s.stage); x1-x0 > textWidth(label, 10)+4 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="%s">%s</text>`+"\n", (x0+x1)/2, y+barHeight/2+4, textOn(fill), esc(label))
			}
			// p99 whisker above the bar, staggered so neighbours stay apart.
			if s.p99 > s.p50 {
				wy := y - 3 - float64(k%3)*3
				xt := x(at + s.p99)
				// A faint line from the segment's end, a firm tick at p99.
				fmt.Fprintf(&b, `<g class="p99" stroke="%s" fill="none"><title>%s p99 %s ms</title><path d="M%.2f %.1fH%.2f" stroke-width="1" stroke-opacity="0.45"/><path d="M%.2f %.1fV%.1f" stroke-width="1.6"/></g>`+"\n",
					darker(fill), esc(s.stage), ms(s.p99), x1, wy, xt, xt, wy-3, wy+3)
			}
			at += s.p50
		}
		if c, ok := Find(rd.Stages, PhaseTotal, StageCycle); ok {
			xc, x99 := x(c.P50Ns), x(c.P99Ns)
			yb := y + barHeight
			fmt.Fprintf(&b, `<path class="cycle-p50" d="M%.2f %.1fl-4 7h8z" fill="black"><title>full cycle p50 %s ms</title></path>`+"\n", xc, yb+1, ms(c.P50Ns))
			fmt.Fprintf(&b, `<path class="cycle-p99" d="M%.2f %.1fV%.1f" stroke="black" stroke-width="2"><title>full cycle p99 %s ms</title></path>`+"\n", x99, y-2, yb+8, ms(c.P99Ns))
			label := fmt.Sprintf("cycle %s / %s ms", ms(c.P50Ns), ms(c.P99Ns))
			lx, anchor := x99+4, "start"
			if lx+textWidth(label, 10) > svgWidth-4 {
				lx, anchor = x99-4, "end" // keep it inside the picture
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#333" text-anchor="%s">%s</text>`+"\n", lx, yb+8, anchor, esc(label))
		}
		fmt.Fprintf(&b, "</g>\n")
	}
	fmt.Fprintf(&b, "</g>\n")

	// Legend.
	fmt.Fprintf(&b, `<g id="legend" font-size="11">`+"\n")
	if len(rounds) > 0 {
		fmt.Fprintf(&b, `<text x="10" y="%.1f" fill="#555">stages with their p50 at %s:</text>`+"\n", legendTop-18, esc(rounds[0].Name))
	}
	colW := float64(svgWidth-20) / legendCols
	for i, e := range legend {
		lx := 10 + float64(i%legendCols)*colW
		ly := legendTop + float64(i/legendCols)*legendRowH
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s" stroke="#999" stroke-width="0.5"/>`+"\n", lx, ly-10, e.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+17, ly, esc(e.text))
	}
	fmt.Fprintf(&b, "</g>\n")

	writeCurveSVG(&b, r, curveTop)
	fmt.Fprintf(&b, "</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// chartRounds are the bars: rounds without live pods and with the most.
func chartRounds(r *Report) []Round {
	L := maxLive(r)
	var out []Round
	for _, rd := range r.Rounds {
		if rd.Live == 0 || rd.Live == L {
			out = append(out, rd)
		}
	}
	return out
}

func roundLabel(rd Round) string {
	if rd.Live == 0 {
		return fmt.Sprintf("c=%d", rd.Concurrency)
	}
	return fmt.Sprintf("c=%d, %d live", rd.Concurrency, rd.Live)
}

// stageColors gives every outer stage one color across rounds, from a
// palette per phase so run and teardown read apart.
func stageColors(rounds []Round) map[string]string {
	colors := map[string]string{}
	nRun, nTd := 0, 0
	for _, rd := range rounds {
		for _, s := range rd.Stages {
			if !s.Outer || s.Phase == PhaseTotal || colors[s.Stage] != "" {
				continue
			}
			switch {
			case isOther(s.Stage):
				colors[s.Stage] = otherColor
			case s.Phase == PhaseWait:
				colors[s.Stage] = waitColor
			case s.Phase == PhaseTeardown:
				colors[s.Stage] = teardownColors[nTd%len(teardownColors)]
				nTd++
			default:
				colors[s.Stage] = runColors[nRun%len(runColors)]
				nRun++
			}
		}
	}
	return colors
}

type legendEntry struct{ text, color string }

// legendEntries lists the stages with the first round's p50.
func legendEntries(rounds []Round, colors map[string]string) []legendEntry {
	var out []legendEntry
	seen := map[string]bool{}
	for _, rd := range rounds {
		for _, s := range rd.Stages {
			if !s.Outer || s.Phase == PhaseTotal || seen[s.Stage] {
				continue
			}
			seen[s.Stage] = true
			out = append(out, legendEntry{fmt.Sprintf("%s %s ms", s.Stage, ms(s.P50Ns)), colors[s.Stage]})
		}
	}
	return out
}

func writeCurveSVG(b *bytes.Buffer, r *Report, top float64) {
	pts := r.LiveCurve
	left, right := float64(svgLeft), float64(svgWidth-svgRight-150)
	plotTop, plotBottom := top+30, top+curveH-40
	fmt.Fprintf(b, `<g id="live-curve">`+"\n")
	c := 0
	if len(pts) > 0 {
		c = pts[0].Concurrency
	}
	fmt.Fprintf(b, `<text x="10" y="%.1f" font-size="14" font-weight="bold">Latency vs live pods (p50, c=%d)</text>`+"\n", top+8, c)
	if len(pts) == 0 {
		fmt.Fprintf(b, `<text x="10" y="%.1f" fill="#555">no rounds</text>`+"\n</g>\n", top+30)
		return
	}
	var ymaxNs int64 = 1
	maxLivePods := 0
	for _, p := range pts {
		ymaxNs = max(ymaxNs, p.ReadyP50Ns, p.UpP50Ns, p.CycleP50Ns)
		maxLivePods = max(maxLivePods, p.Live)
	}
	ymax, ystep := niceScale(float64(ymaxNs) / 1e6)
	xmax, xstep := niceScale(float64(max(maxLivePods, 1)))
	xmax, xstep = math.Max(xmax, 1), math.Max(math.Round(xstep), 1)
	px := func(live int) float64 { return left + float64(live)/xmax*(right-left) }
	py := func(ns int64) float64 { return plotBottom - float64(ns)/1e6/ymax*(plotBottom-plotTop) }

	fmt.Fprintf(b, `<g class="axis" stroke="#ddd">`+"\n")
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := plotBottom - v/ymax*(plotBottom-plotTop)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", left, y, right, y)
	}
	for v := 0.0; v <= xmax+xstep/2; v += xstep {
		x := left + v/xmax*(right-left)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", x, plotTop, x, plotBottom)
	}
	fmt.Fprintf(b, "</g>\n")
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := plotBottom - v/ymax*(plotBottom-plotTop)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, y+4, trimFloat(v))
	}
	for v := 0.0; v <= xmax+xstep/2; v += xstep {
		x := left + v/xmax*(right-left)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%s</text>`+"\n", x, plotBottom+16, trimFloat(v))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">live pods on the node</text>`+"\n", (left+right)/2, plotBottom+32)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555" transform="rotate(-90 %.1f %.1f)">ms</text>`+"\n", left-44, (plotTop+plotBottom)/2, left-44, (plotTop+plotBottom)/2)

	up := StageFirstExit
	if r.WaitFor == StageWaitRunning {
		up = StageRunning
	}
	series := []struct {
		name, color string
		v           func(Point) int64
	}{
		{StageCycle, "#d62728", func(p Point) int64 { return p.CycleP50Ns }},
		{up, "#2ca02c", func(p Point) int64 { return p.UpP50Ns }},
		{StageReady, "#1f77b4", func(p Point) int64 { return p.ReadyP50Ns }},
	}
	for i, s := range series {
		var d strings.Builder
		for k, p := range pts {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, px(p.Live), py(s.v(p)))
		}
		fmt.Fprintf(b, `<g class="series" data-series="%s">`+"\n", esc(s.name))
		fmt.Fprintf(b, `<path d="%s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", d.String(), s.color)
		for _, p := range pts {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s p50 %s ms with %d live pods</title></circle>`+"\n", px(p.Live), py(s.v(p)), s.color, esc(s.name), ms(s.v(p)), p.Live)
		}
		last := pts[len(pts)-1]
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s %s ms</text>`+"\n", right+10, plotTop+10+float64(i)*18, s.color, esc(s.name), ms(s.v(last)))
		fmt.Fprintf(b, "</g>\n")
	}
	if len(pts) == 1 {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#555">one point only: run with --live L for the curve</text>`+"\n", left+10, plotTop+14)
	} else if base := pts[0].UpP50Ns; base > 0 {
		last := pts[len(pts)-1]
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="#555">%s p50 with %d live pods: %.2f× the value with %d</text>`+"\n",
			left+300, top+8, esc(up), last.Live, float64(last.UpP50Ns)/float64(base), pts[0].Live)
	}
	fmt.Fprintf(b, "</g>\n")
}

// niceScale returns an axis maximum ≥ v and a step of 1, 2 or 5 × 10^k
// giving at most about 8 intervals, with little room to spare.
func niceScale(v float64) (maxV, step float64) {
	if v <= 0 {
		return 1, 0.25
	}
	raw := v / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	maxV = math.Ceil(v/step) * step
	return maxV, step
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// shortStage drops the "ctr NAME " prefix for in-bar labels.
func shortStage(s string) string {
	if rest, ok := strings.CutPrefix(s, "ctr "); ok {
		if _, after, ok := strings.Cut(rest, " "); ok {
			return after
		}
	}
	return s
}

// textWidth estimates a label's width (px) at a font size.
func textWidth(s string, size float64) float64 { return float64(len([]rune(s))) * size * 0.6 }

// textOn picks black or white text for a fill by its luminance.
func textOn(fill string) string {
	r, g, bl := hexRGB(fill)
	if 0.299*r+0.587*g+0.114*bl > 150 {
		return "#111"
	}
	return "white"
}

func darker(fill string) string {
	r, g, b := hexRGB(fill)
	return fmt.Sprintf("#%02x%02x%02x", int(r*0.6), int(g*0.6), int(b*0.6))
}

func hexRGB(s string) (r, g, b float64) {
	var ri, gi, bi int
	fmt.Sscanf(strings.TrimPrefix(s, "#"), "%02x%02x%02x", &ri, &gi, &bi)
	return float64(ri), float64(gi), float64(bi)
}

func esc(s string) string { return html.EscapeString(s) }
