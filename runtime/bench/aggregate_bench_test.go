package bench

import (
	"io"
	"testing"
)

// Aggregation runs once per round over every cycle's ~35 spans (nesting is
// quadratic per cycle): it must stay negligible next to the cycles.
func BenchmarkAggregate1000(b *testing.B) {
	cycles := make([]Cycle, 1000)
	for i := range cycles {
		cycles[i] = fakeCycle(i, 1+float64(i%13)/10)
	}
	b.ReportAllocs()
	for b.Loop() {
		Aggregate(cycles)
	}
}

func BenchmarkWriteReport(b *testing.B) {
	r := fakeReport(100)
	b.ReportAllocs()
	for b.Loop() {
		WriteJSON(io.Discard, r)
		WriteCSV(io.Discard, r)
		WriteTable(io.Discard, r)
		WriteSVG(io.Discard, r)
	}
}
