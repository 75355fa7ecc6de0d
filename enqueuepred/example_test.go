package enqueuepred_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

func ExampleNewThreshold() {
	q := sink.NewNamedQueue("Pages", 0)
	q.SetPredicate(enqueuepred.NewThreshold(2)) // binds to q
	for i := 0; i < 3; i++ {
		err := q.Enqueue(i)
		fmt.Println(i, err == nil, errors.Is(err, sink.ErrRejected))
	}
	// Output:
	// 0 true false
	// 1 true false
	// 2 false true
}

func ExampleNewRate() {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	r := enqueuepred.NewRate(enqueuepred.RateConfig{Rate: 2500, Depth: 5, Now: clock})
	admitted := 0
	for i := 0; i < 10; i++ {
		if r.Accept(i) {
			admitted++
		}
	}
	fmt.Println("burst admitted:", admitted)
	now = now.Add(2 * time.Millisecond) // 2 ms at 2500/s = 5 tokens
	admitted = 0
	for i := 0; i < 10; i++ {
		if r.Accept(i) {
			admitted++
		}
	}
	fmt.Println("after 2ms:", admitted)
	// Output:
	// burst admitted: 5
	// after 2ms: 5
}

func ExampleNewCounter() {
	c := enqueuepred.NewCounter(1)
	fmt.Println(c.Accept("a"), c.Accept("b"))
	// The runtime reports completion (also of failed events) through
	// sink.Done, which returns the credit.
	sink.Done(c, "a", time.Millisecond, time.Millisecond)
	fmt.Println(c.Accept("b"))
	// Output:
	// true false
	// true
}

func ExampleNewResponseTime() {
	now := time.Unix(0, 0)
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{
		Target: time.Second,
		Mode:   "thesis", // the paper's algorithm, Fig. 50
		Now:    func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("initial rate %.0f/s\n", rt.Rate())
	// 100 completions at 3 s each: the controller runs and cuts the rate.
	for i := 0; i < 100; i++ {
		sink.Done(rt, i, 2*time.Second, time.Second)
	}
	for i := 0; i < 100; i++ {
		sink.Done(rt, i, 2*time.Second, time.Second)
	}
	fmt.Printf("p90 estimate %v, rate %.2f/s\n", rt.P90(), rt.Rate())

	// Service degradation (§7.2.2): the application reads the estimate and
	// may switch admission control off while it degrades quality instead.
	if rt.P90() > time.Second {
		rt.Disable()
	}
	fmt.Println("admission control enabled:", rt.Enabled())
	// Output:
	// initial rate 10/s
	// p90 estimate 1.53s, rate 8.33/s
	// admission control enabled: false
}

type request struct {
	user  string
	class int
}

func (r request) Principal() enqueuepred.Principal {
	return enqueuepred.Principal{ID: r.user, Class: r.class}
}

func ExampleNewSession() {
	// One session admitted per 'counter' credit; later requests of an
	// admitted session are admitted too, a rejected session stays rejected.
	s := enqueuepred.NewSession(enqueuepred.NewCounter(1), enqueuepred.SessionConfig{Window: time.Minute})
	fmt.Println(s.Accept(request{user: "ann"}), s.Accept(request{user: "bob"}))
	fmt.Println(s.Accept(request{user: "ann"}), s.Accept(request{user: "bob"}))
	// Output:
	// true false
	// true false
}

type teardown struct{}

func (teardown) NonRejectable() bool { return true }

// Events reporting NonRejectable() == true (sink.NonRejectable) bypass
// admission in every predicate here, and are still charged.
func Example_nonRejectable() {
	c := enqueuepred.NewCounter(0) // admits nothing rejectable
	fmt.Println(c.Accept("login"), c.Accept(teardown{}))
	// Output:
	// false true
}

func ExampleNewAll() {
	sh := enqueuepred.NewShared()
	group, _ := sh.Group("backend", enqueuepred.RateConfig{Rate: 1000, Depth: 1})
	// The least of the stage's own counter and the group rate (JOBS §7.2.3).
	p := enqueuepred.NewAll(enqueuepred.NewCounter(10), group)
	fmt.Println(p.Accept(1), p.Accept(2))
	// Output:
	// true false
}

func ExampleFromSpec() {
	src := `
type: all
of:
  - {type: threshold, limit: 1000}
  - type: rate
    rate: 5000
    depth: 100
    modifiers:
      - {sampler: cpu, value: {80: 1, 90: 2, 100: 3}, factor: 20}
`
	// A runtime hands over the block of its configuration file; package
	// stage's decoders are Specs.
	spec, err := stage.NewDecoder([]byte(src), "", "stages.Echo.predicate")
	if err != nil {
		panic(err)
	}
	env := enqueuepred.Env{Stage: "Echo", Shared: enqueuepred.NewShared()}
	p, err := enqueuepred.FromSpec(spec, env)
	if err != nil {
		panic(err)
	}
	fmt.Println(sink.PredicateName(p), p.Accept("hello"))

	bad, _ := stage.NewDecoder([]byte(`{type: rate, rate: 5000, dept: 100}`), "", "stages.Echo.predicate")
	_, err = enqueuepred.FromSpec(bad, env)
	fmt.Println(err)
	// Output:
	// all true
	// line 1: stages.Echo.predicate.dept: unknown key (did you mean "depth"? known: depth, modifiers, rate, shards, type)
}

func ExampleInspector() {
	var p sink.Predicate = enqueuepred.NewCounter(4)
	p.Accept(1)
	p.(enqueuepred.Inspector).Inspect(func(name string, v float64) {
		fmt.Println(name, v)
	})
	// Output:
	// limit 4
	// inflight 1
	// accepted 1
	// rejected 0
}

// A Vegas concurrency limit on a stage's queue: at most Limit() events
// queued or in service; the runtime's completions (sink.Done) move the
// limit.
func ExampleNewLimit() {
	l, err := enqueuepred.NewLimit(enqueuepred.LimitConfig{Algorithm: "vegas", Initial: 2})
	if err != nil {
		panic(err)
	}
	q := sink.NewNamedQueue("Search", 0)
	q.SetPredicate(l)
	for i := 0; i < 3; i++ {
		fmt.Println(i, q.Enqueue(i) == nil)
	}
	// The runtime reports each handled event: 1 ms queued, 10 ms service.
	sink.Done(l, 0, time.Millisecond, 10*time.Millisecond)
	fmt.Println("limit", l.Limit(), "in flight", l.InFlight())
	// Output:
	// 0 true
	// 1 true
	// 2 false
	// limit 8 in flight 1
}

// A queueing regulator (JOBS): the handler waits for the pacer before each
// batch, so the stage's queue drains at 50 events/s whatever the load;
// the queue's threshold bounds how many may wait.
func ExampleNewPacer() {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now } // a fixed clock, for the example's output
	pacer, err := enqueuepred.NewPacer(enqueuepred.PacerConfig{Rate: 50, Depth: 5, Now: clock})
	if err != nil {
		panic(err)
	}
	handle := func(batch []sink.Event) error {
		if err := pacer.Wait(context.Background(), len(batch)); err != nil {
			return err
		}
		// ... handle the batch
		return nil
	}
	// The first 5 events go at once (the depth), the next waits 20 ms.
	for range 5 {
		_ = handle([]sink.Event{1})
	}
	fmt.Println(pacer.Reserve(1))
	// Output:
	// 20ms
}

// A counter of 100 credits cut by 10% per degree of CPU overload: degree 1
// from 80% CPU, 2 from 90%. The built-in samplers are those a YAML
// modifier names; any type with Name and Sample is a Sampler too.
func ExampleNewModified() {
	cpu, err := enqueuepred.NewSampler("cpu", "", enqueuepred.Env{})
	if err != nil {
		panic(err)
	}
	p, err := enqueuepred.NewModified(enqueuepred.NewCounter(100), enqueuepred.ModifiedConfig{
		Modifiers: []enqueuepred.Modifier{{
			Sampler: cpu,
			Value:   []enqueuepred.Step{{At: 80, Degree: 1}, {At: 90, Degree: 2}},
			Factor:  10,
		}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Accept("event")) // the first CPU reading only starts the measure
	_, err = enqueuepred.NewModified(enqueuepred.NewSojourn(enqueuepred.SojournConfig{}), enqueuepred.ModifiedConfig{})
	fmt.Println(errors.Is(err, enqueuepred.ErrBadConfig)) // a codel has no limit to scale
	// Output:
	// true
	// true
}

// Whirlwind's cost limit: expensive events are refused first, cheap ones
// still get in.
func ExampleNewCost() {
	p, err := enqueuepred.NewCost(enqueuepred.CostConfig{Limit: 10})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Accept(job(8)), p.Accept(job(8)), p.Accept(job(2)))
	// Output:
	// true false true
}

// job is an event that estimates its cost (enqueuepred.Costed).
type job float64

func (j job) Cost() float64 { return float64(j) }
