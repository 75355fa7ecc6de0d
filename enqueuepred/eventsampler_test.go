package enqueuepred

import (
	"errors"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestEventSamplers: a rate regulator whose limit is cut while the stage's
// own completions report a long queue wait; the sampler is fed by the
// events going through the predicate, not by polling another stage.
func TestEventSamplers(t *testing.T) {
	clk := newClock()
	wait := newEventSampler(kindWait)
	arr := newEventSampler(kindArrivals)
	m, err := newModified(NewRate(RateConfig{Rate: 1000, Depth: 1000, Now: clk.Now}), ModifiedConfig{
		Modifiers: []Modifier{
			{Sampler: wait, Value: []Step{{At: 50, Degree: 5}}, Interval: time.Second},
			{Sampler: arr, Value: []Step{{At: 1e9, Degree: 1}}, Interval: time.Second},
		},
		Now: clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Update() // first samples: no completion, no previous arrival sample
	for range 10 {
		m.Accept(ev{})
		sink.Done(m, ev{}, 80*time.Millisecond, 5*time.Millisecond)
	}
	clk.Advance(time.Second)
	m.Update()
	if m.Scale() != 0.5 {
		t.Fatalf("scale %v, want 0.5 (degree 5 × 10 %%) after waits of 80 ms", m.Scale())
	}
	if got := m.mods[1].value; got != 10 {
		t.Fatalf("arrivals %v/s, want 10", got)
	}
	// No completion in the next second: the wait sampler has no value and
	// the modifier keeps its degree.
	clk.Advance(time.Second)
	if _, err := wait.Sample(clk.Now()); !errors.Is(err, errNoSample) {
		t.Fatalf("empty window: %v", err)
	}
	svc := newEventSampler(kindService)
	svc.Completed(ev{}, time.Second, 4*time.Millisecond)
	svc.Completed(ev{}, time.Second, 6*time.Millisecond)
	if v, err := svc.Sample(clk.Now()); err != nil || v != 5 {
		t.Fatalf("service %v, %v; want 5 ms", v, err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("{type: rate, rate: 10, modifiers: [{sampler: wait, value: {50: 1}}, {sampler: arrivals, value: {100: 1}}]}"), &n); err != nil {
		t.Fatal(err)
	}
	p, err := fromYAML(&n, "p", Env{})
	if err != nil {
		t.Fatal(err)
	}
	if fed := p.(*modified).fed; len(fed) != 2 || fed[0].Name() != "wait" || fed[1].Name() != "arrivals" {
		t.Fatalf("fed samplers %v", fed)
	}
}
