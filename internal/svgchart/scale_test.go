package svgchart

import (
	"math"
	"testing"
)

func TestNiceRange(t *testing.T) {
	tests := []struct {
		lo, hi         float64
		n              int
		min, max, step float64
	}{
		{0, 200, 5, 0, 200, 50},
		{0, 7, 5, 0, 8, 2},
		{0, 0, 5, 0, 1, 0.2},
		{0, 1234, 8, 0, 1400, 200},
		{-3, 4, 5, -4, 4, 2},
		{0, 0.09, 5, 0, 0.1, 0.02},
		{0, 1100, 5, 0, 1250, 250},
	}
	for _, tt := range tests {
		lo, hi, step := niceRange(tt.lo, tt.hi, tt.n)
		if math.Abs(lo-tt.min) > 1e-9 || math.Abs(hi-tt.max) > 1e-9 || math.Abs(step-tt.step) > 1e-9 {
			t.Errorf("niceRange(%v, %v, %d) = %v, %v, %v; want %v, %v, %v", tt.lo, tt.hi, tt.n, lo, hi, step, tt.min, tt.max, tt.step)
		}
	}
}

func TestScale(t *testing.T) {
	data := []float64{0.04, 0, 250, math.Inf(1), math.NaN()}
	tests := []struct {
		name   string
		a      Axis
		lo, hi float64 // in the scale's units
		ticks  []float64
	}{
		{"linear from zero, infinities left out", Axis{}, 0, 250, []float64{0, 50, 100, 150, 200, 250}},
		{"linear, fixed range", Axis{Min: 10, Max: 20, Ticks: []float64{10, 20}}, 10, 20, []float64{10, 20}},
		{"log10 decades", Axis{Scale: Log10}, -2, 3, []float64{0.01, 0.1, 1, 10, 100, 1000}},
		{"log2 powers", Axis{Scale: Log2}, -5, 8, nil},
		{"log10, fixed range", Axis{Scale: Log10, Min: 1, Max: 1000}, 0, 3, []float64{1, 10, 100, 1000}},
	}
	for _, tt := range tests {
		s := newScale(tt.a, data, 5)
		if math.Abs(s.lo-tt.lo) > 1e-9 || math.Abs(s.hi-tt.hi) > 1e-9 {
			t.Errorf("%s: range %v..%v, want %v..%v", tt.name, s.lo, s.hi, tt.lo, tt.hi)
		}
		if tt.ticks != nil && !near(s.ticks, tt.ticks) {
			t.Errorf("%s: ticks %v, want %v", tt.name, s.ticks, tt.ticks)
		}
	}
	// Given ticks on a log axis: the data's range with a margin, not
	// whole decades.
	s := newScale(Axis{Scale: Log10, Ticks: []float64{1, 4, 16}}, data, 5)
	if s.lo >= math.Log10(0.04) || s.hi <= math.Log10(250) || s.hi > 3 || len(s.ticks) != 3 {
		t.Errorf("log10 with ticks: %v..%v, ticks %v", s.lo, s.hi, s.ticks)
	}
	// No data: a default range.
	if s := newScale(Axis{Scale: Log10}, nil, 5); s.lo != 0 || s.hi != 1 {
		t.Errorf("log10 without data: %v..%v", s.lo, s.hi)
	}
}

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*math.Max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}
