package main

import (
	"strings"
	"testing"
	"time"
)

// TestSmoke runs both experiments at a tiny scale on the real runtime and
// checks that every configured run reports its rows. It asserts no timing
// figures: those depend on the machine.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stage runtime for several seconds")
	}
	o := options{
		service: time.Millisecond, workers: 2, think: 20 * time.Millisecond, backoff: 50 * time.Millisecond,
		target: 20 * time.Millisecond, base: 2, clients: 50, baseDur: time.Second, spikeDur: time.Second,
		tailDur: time.Second, classSize: 10, classPhase: 500 * time.Millisecond, series: true,
		modes: []string{"none", "fast", "thesis", "single"},
	}
	var b strings.Builder
	runSpike(&b, o)
	out := b.String()
	for _, want := range []string{"| none |", "| thesis |", "| fast |", "spike, control fast, per second", "| 2 |"} {
		if !strings.Contains(out, want) {
			t.Fatalf("spike output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	runMulticlass(&b, o)
	out = b.String()
	for _, want := range []string{"| single |", "| thesis |", "| fast |", "multiclass, control fast, per second"} {
		if !strings.Contains(out, want) {
			t.Fatalf("multiclass output lacks %q:\n%s", want, out)
		}
	}
}

// TestMatrixSmoke runs one matrix scenario briefly under each controller
// and checks the rows are written; no timing figure is asserted.
func TestMatrixSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stage runtime for several seconds")
	}
	var b strings.Builder
	runMatrix(&b, []string{"rt", "vegas", "gradient"}, 2*time.Second, "below capacity", true)
	out := b.String()
	for _, want := range []string{"| 4w × 10ms, 0.7× (below capacity) | 100ms | rt |", "| vegas |", "| gradient |", "done/refused/p90/estimate"} {
		if !strings.Contains(out, want) {
			t.Fatalf("matrix output lacks %q:\n%s", want, out)
		}
	}
}
