package stage_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestPredicatesInstalledUnderPressure: while memory is high, an rt
// predicate that a Reload installs (replacing a stage's predicate, giving
// one to a stage that had none, or with an added stage), and one of a
// stage created in Go and one a program sets on it, start under pressure, without waiting for the next
// crossing; once memory is back under the low mark all are lifted.
func TestPredicatesInstalledUnderPressure(t *testing.T) {
	const before = `
stages:
  Degrading:
    handler: test.Count
    predicate: {type: rt, target: 1s}
  Plain: {handler: test.Count}
`
	const after = `
stages:
  Degrading:
    handler: test.Count
    predicate: {type: rt, target: 2s}
  Plain:
    handler: test.Count
    predicate: {type: rt, target: 1s}
  Added:
    handler: test.Count
    predicate: {type: rt, target: 1s}
`
	m, err := stage.Parse([]byte(before), testRegistry(nil))
	if err != nil {
		t.Fatal(err)
	}
	started(t, m)
	rtOf := func(name string) *enqueuepred.ResponseTime {
		t.Helper()
		s, ok := m.Stage(name)
		if !ok {
			t.Fatalf("no stage %s", name)
		}
		rt := enqueuepred.ResponseTimeOf(s.Sink().Predicate())
		if rt == nil {
			t.Fatalf("stage %s has no rt predicate", name)
		}
		return rt
	}
	old := rtOf("Degrading")

	var used uint64
	src := stage.MemorySourceFunc(func() (uint64, uint64) { return used, 1000 })
	mm := stage.NewMemoryMonitor(m, src, stage.MemoryConfig{High: 0.9, Low: 0.8})
	used = 950
	if mm.Check() != stage.MemoryHigh || !old.Pressure() {
		t.Fatalf("memory high: level %v, running rt under pressure %v", mm.Level(), old.Pressure())
	}

	cfg, err := stage.ParseConfig([]byte(after), "after.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("InGo", stage.HandlerFunc(func([]sink.Event) error { return nil }), stage.StageConfig{
		Predicate: mustRT(t)}); err != nil {
		t.Fatal(err)
	}
	inGo, _ := m.Stage("InGo")
	inGo.Sink().(interface{ SetPredicate(sink.Predicate) }).SetPredicate(mustRT(t))
	stages := []string{"Degrading", "Plain", "Added", "InGo"}
	if rtOf("Degrading") == old {
		t.Fatal("the reload did not replace Degrading's rt predicate")
	}
	for _, name := range stages {
		if !rtOf(name).Pressure() {
			t.Errorf("%s: the rt predicate installed while memory is high is not under pressure", name)
		}
	}

	used = 700
	if mm.Check() != stage.MemoryOK {
		t.Fatal("memory did not come back to ok")
	}
	for _, name := range stages {
		if rtOf(name).Pressure() {
			t.Errorf("%s: pressure not lifted at memory-ok", name)
		}
	}
}

func mustRT(t *testing.T) *enqueuepred.ResponseTime {
	t.Helper()
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
