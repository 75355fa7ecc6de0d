package enqueuepred

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func TestThreshold(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		length int
		scale  float64
		e      sink.Event
		want   bool
	}{
		{"under", 10, 9, 1, 1, true},
		{"at limit", 10, 10, 1, 1, false},
		{"over", 10, 50, 1, 1, false},
		{"zero limit", 0, 0, 1, 1, false},
		{"scaled down", 10, 5, 0.5, 1, false},
		{"scaled under", 10, 4, 0.5, 1, true},
		{"non-rejectable", 10, 50, 1, ev{must: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := newThreshold(tt.limit)
			sink.Bind(th, &lenSink{n: tt.length})
			th.Scale(tt.scale)
			if got := th.Accept(tt.e); got != tt.want {
				t.Fatalf("Accept = %v, want %v", got, tt.want)
			}
			m := inspectMap(th)
			if (m["rejected"] == 1) == tt.want {
				t.Fatalf("rejected count %v for decision %v", m["rejected"], tt.want)
			}
		})
	}
}

func TestThresholdOnQueue(t *testing.T) {
	q := sink.NewNamedQueue("S", 0)
	th := newThreshold(2)
	q.SetPredicate(th)
	for i := 0; i < 2; i++ {
		if err := q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	err := q.Enqueue(3)
	var re *sink.RejectError
	if !errors.As(err, &re) || re.Predicate != "threshold" {
		t.Fatalf("third enqueue: %v", err)
	}
	th.SetLimit(3)
	if err := q.Enqueue(3); err != nil {
		t.Fatalf("after SetLimit: %v", err)
	}
	if th.Limit() != 3 || th.EffectiveLimit() != 3 {
		t.Fatal("limit not updated")
	}
}

func TestRateBucket(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		depth    int
		advance  time.Duration
		attempts int
		want     int
	}{
		{"burst of depth", 100, 5, 0, 10, 5},
		{"refill 10ms at 100/s", 100, 5, 10 * time.Millisecond, 10, 6},
		{"refill capped at depth", 100, 5, time.Hour, 10, 10},
		{"high rate no 1ms tick", 1e6, 10, 5 * time.Microsecond, 20, 15},
		{"very low rate", 0.05, 1, 19 * time.Second, 3, 1},
		{"fractional rate", 0.5, 1, 2 * time.Second, 3, 2},
		{"default depth rate/100", 10000, 0, 0, 1000, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			r := NewRate(RateConfig{Rate: tt.rate, Depth: tt.depth, Now: clk.Now})
			got := 0
			if tt.advance > 0 {
				got = count(r, 1, tt.attempts) // drain
				clk.Advance(tt.advance)
			}
			got += count(r, 1, tt.attempts)
			if got != tt.want {
				t.Fatalf("admitted %d, want %d", got, tt.want)
			}
			m := inspectMap(r)
			want := float64(2*tt.attempts - tt.want)
			if tt.advance == 0 {
				want = float64(tt.attempts - tt.want)
			}
			if m["rejected"] != want {
				t.Fatalf("rejected %v, want %v", m["rejected"], want)
			}
		})
	}
}

func TestRateLongRunIsExact(t *testing.T) {
	// 3 s at 7777/s with a request every 10µs: admitted ≈ depth + 3*7777.
	clk := newClock()
	r := NewRate(RateConfig{Rate: 7777, Depth: 10, Now: clk.Now})
	got := 0
	for i := 0; i < 300000; i++ {
		if r.Accept(1) {
			got++
		}
		clk.Advance(10 * time.Microsecond)
	}
	if want := 10 + 3*7777; math.Abs(float64(got-want)) > 2 {
		t.Fatalf("admitted %d, want %d±2", got, want)
	}
}

func TestRateSettersCancelChargeBatch(t *testing.T) {
	clk := newClock()
	r := NewRate(RateConfig{Rate: 10, Depth: 2, Now: clk.Now})
	if !admitMany(r, []sink.Event{1, 2}) || admitMany(r, []sink.Event{3}) {
		t.Fatal("batch of depth admitted, next refused expected")
	}
	sink.Cancel(r, 1)
	if !r.Accept(1) {
		t.Fatal("cancelled token not returned")
	}
	if !r.Accept(ev{must: true}) {
		t.Fatal("non-rejectable refused")
	}
	if tok := r.Tokens(); tok > -0.99 || tok < -1.01 {
		t.Fatalf("non-rejectable should leave a debt of one token, tokens=%v", tok)
	}
	clk.Advance(200 * time.Millisecond) // pays the debt and refills one
	if !r.Accept(1) || r.Accept(1) {
		t.Fatal("debt not repaid at the configured rate")
	}
	r.SetRate(1000)
	r.SetDepth(50)
	clk.Advance(time.Second)
	if got := count(r, 1, 100); got != 50 {
		t.Fatalf("after SetRate/SetDepth admitted %d, want 50", got)
	}
	r.Scale(0.1)
	if r.EffectiveRate() != 100 || r.Rate() != 1000 {
		t.Fatalf("scale: effective %v nominal %v", r.EffectiveRate(), r.Rate())
	}
	r.SetRate(0)
	if !math.IsInf(r.Rate(), 1) || count(r, 1, 1000) != 1000 {
		t.Fatal("rate 0 should be unlimited")
	}
	if inspectMap(r)["rate"] != -1 {
		t.Fatal("unlimited rate should inspect as -1")
	}
}

func TestCounter(t *testing.T) {
	c := newCounter(2)
	if count(c, 1, 5) != 2 {
		t.Fatal("want 2 in flight")
	}
	sink.Done(c, 1, time.Millisecond, time.Millisecond)
	if !c.Accept(1) || c.Accept(1) {
		t.Fatal("credit not returned by Done")
	}
	sink.Cancel(c, 1)
	if !c.Accept(1) {
		t.Fatal("credit not returned by Cancel")
	}
	if !c.Accept(ev{must: true}) || c.InFlight() != 3 {
		t.Fatalf("non-rejectable must be charged beyond the limit, inflight=%d", c.InFlight())
	}
	for i := 0; i < 10; i++ {
		sink.Done(c, 1, 0, 0) // more than were admitted: must not go negative
	}
	if c.InFlight() != 0 {
		t.Fatalf("inflight %d after excess Done", c.InFlight())
	}
	if !admitMany(c, []sink.Event{1, 2}) || admitMany(c, []sink.Event{3}) || c.InFlight() != 2 {
		t.Fatal("AcceptMany all or nothing")
	}
	c.SetLimit(10)
	c.Scale(0.3)
	if c.EffectiveLimit() != 3 || !c.Accept(1) || c.Accept(1) {
		t.Fatalf("scaled limit %d", c.EffectiveLimit())
	}
	m := inspectMap(c)
	if m["limit"] != 3 || m["inflight"] != 3 || m["rejected"] != 6 {
		t.Fatalf("inspect %v", m)
	}
}

func TestRED(t *testing.T) {
	tests := []struct {
		name    string
		length  int
		gentle  bool
		wantMin float64 // admitted fraction bounds
		wantMax float64
	}{
		{"below min", 50, false, 1, 1},
		{"between", 200, false, 0.9, 0.98}, // pb = 0.05, spaced drops ≈ 2*pb
		{"above max", 400, false, 0, 0},
		{"gentle above max", 400, true, 0.15, 0.45}, // pb = 0.4
		{"far above gentle", 1000, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed := uint64(1)
			rnd := func() float64 { // deterministic LCG
				seed = seed*6364136223846793005 + 1442695040888963407
				return float64(seed>>11) / (1 << 53)
			}
			r := newRED(REDConfig{Min: 100, Max: 300, MaxP: 0.1, Weight: 1, Gentle: tt.gentle, Rand: rnd})
			sink.Bind(r, &lenSink{n: tt.length})
			const n = 10000
			frac := float64(count(r, 1, n)) / n
			if frac < tt.wantMin || frac > tt.wantMax {
				t.Fatalf("admitted fraction %v, want [%v, %v]", frac, tt.wantMin, tt.wantMax)
			}
			if r.Average() != float64(tt.length) {
				t.Fatalf("average %v", r.Average())
			}
		})
	}
}

func TestREDAveragesSlowly(t *testing.T) {
	r := newRED(REDConfig{Min: 10, Max: 20, Weight: 0.01, Rand: func() float64 { return 0 }})
	l := &lenSink{n: 1000}
	sink.Bind(r, l)
	// A short burst: the average stays under Min for the first few events.
	if !r.Accept(1) {
		t.Fatal("a single burst sample must not trigger drops")
	}
	if a := r.Average(); a != 10 {
		t.Fatalf("average %v, want 10", a)
	}
}

func TestSojourn(t *testing.T) {
	clk := newClock()
	s := newSojourn(SojournConfig{Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond, Now: clk.Now})
	l := &lenSink{n: 10}
	sink.Bind(s, l)
	steps := []struct {
		queued time.Duration // every completion this window
		want   bool          // decision after the window closes
	}{
		{20 * time.Millisecond, false}, // standing queue
		{2 * time.Millisecond, true},   // drained under target
		{8 * time.Millisecond, false},
	}
	for i, st := range steps {
		for k := 0; k < 10; k++ {
			sink.Done(s, 1, st.queued+time.Duration(k)*time.Millisecond, time.Millisecond)
			clk.Advance(10 * time.Millisecond)
		}
		clk.Advance(time.Millisecond)
		if got := s.Accept(1); got != st.want {
			t.Fatalf("window %d: Accept = %v, want %v", i, got, st.want)
		}
	}
	if !s.Accept(ev{must: true}) {
		t.Fatal("non-rejectable refused")
	}
	l.n = 0
	if !s.Accept(1) || s.Overloaded() {
		t.Fatal("an empty queue ends the overload")
	}
	m := inspectMap(s)
	if m["overloaded_windows"] != 2 || m["rejected"] != 2 {
		t.Fatalf("inspect %v", m)
	}
}

func TestSojournBurstIsNotOverload(t *testing.T) {
	clk := newClock()
	s := newSojourn(SojournConfig{Now: clk.Now})
	sink.Bind(s, &lenSink{n: 50})
	// One event waited 0ms (the queue was empty once), the others long.
	sink.Done(s, 1, 0, 0)
	for i := 0; i < 50; i++ {
		sink.Done(s, 1, 50*time.Millisecond, 0)
	}
	clk.Advance(101 * time.Millisecond)
	if !s.Accept(1) {
		t.Fatal("minimum under target: burst, not a standing queue")
	}
}

func TestGroupShared(t *testing.T) {
	clk := newClock()
	sh := NewShared()
	a, err := sh.Group("front", RateConfig{Rate: 10, Depth: 4, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sh.Group("front", RateConfig{})
	if err != nil || a != b {
		t.Fatalf("second lookup: %v %v", b, err)
	}
	if _, err := sh.Group("front", RateConfig{Rate: 11}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("conflict: %v", err)
	}
	if _, err := sh.Group("", RateConfig{Rate: 1}); err == nil {
		t.Fatal("empty name accepted")
	}
	// Two stages share the 4-token burst.
	if count(a, 1, 3)+count(b, 1, 3) != 4 {
		t.Fatal("group tokens not shared")
	}
	if a.Name() != "group:front" || len(sh.Groups()) != 1 {
		t.Fatal("name/groups")
	}
}

func TestPriority(t *testing.T) {
	p, err := newPriority(map[int]int{0: 10, 5: 100})
	if err != nil {
		t.Fatal(err)
	}
	l := &lenSink{n: 50}
	sink.Bind(p, l)
	tests := []struct {
		e    sink.Event
		want bool
	}{
		{ev{prio: 0}, false},
		{ev{prio: 3}, false}, // maps to level 0
		{ev{prio: 5}, true},
		{ev{prio: 9}, true}, // maps to level 5
		{ev{prio: -1}, false},
		{"no principal", false},
		{ev{prio: 0, must: true}, true},
	}
	for i, tt := range tests {
		if got := p.Accept(tt.e); got != tt.want {
			t.Fatalf("case %d %v: got %v", i, tt.e, got)
		}
	}
	if err := p.SetLimit(0, 60); err != nil || !p.Accept(ev{}) {
		t.Fatal("SetLimit")
	}
	if p.SetLimit(3, 1) == nil {
		t.Fatal("unknown level accepted")
	}
	if m := inspectMap(p); m["priority0.rejected"] != 4 {
		t.Fatalf("inspect %v", m)
	}
}

func TestSession(t *testing.T) {
	clk := newClock()
	inner := newCounter(1)
	s := newSession(inner, SessionConfig{Window: time.Second, Now: clk.Now})
	alice, bob := ev{id: "alice"}, ev{id: "bob"}
	if !s.Accept(alice) {
		t.Fatal("first session refused")
	}
	if s.Accept(bob) {
		t.Fatal("bob should be refused by the counter")
	}
	// Alice keeps being admitted although the counter is full; charged.
	if !s.Accept(alice) || inner.InFlight() != 2 {
		t.Fatalf("alice's second request, inflight %d", inner.InFlight())
	}
	sink.Done(s, alice, 0, 0)
	sink.Done(s, alice, 0, 0)
	// Bob stays rejected for the window even though credit is free now.
	if s.Accept(bob) {
		t.Fatal("bob's session decision must hold for the window")
	}
	clk.Advance(1100 * time.Millisecond)
	if !s.Accept(bob) {
		t.Fatal("bob should be decided afresh after the window")
	}
	// Anonymous events go straight to the inner predicate.
	if s.Accept(1) {
		t.Fatal("anonymous event should hit the full counter")
	}
	m := inspectMap(s)
	if m["sessions_admitted"] != 1 || m["0.counter.inflight"] != 1 {
		t.Fatalf("inspect %v", m)
	}
	s.Forget("bob")
	if m := inspectMap(s); m["sessions_admitted"] != 0 {
		t.Fatalf("after Forget %v", m)
	}
}

func TestSessionBounded(t *testing.T) {
	clk := newClock()
	s := newSession(newCounter(1000), SessionConfig{Window: time.Second, MaxSessions: 2, Now: clk.Now})
	for _, id := range []string{"a", "b", "c"} {
		s.Accept(ev{id: id})
	}
	if len(s.t.sessions) != 2 {
		t.Fatalf("remembered %d sessions, max 2", len(s.t.sessions))
	}
	clk.Advance(2 * time.Second)
	s.Accept(ev{id: "d"}) // sweeps expired ones
	if len(s.t.sessions) != 1 {
		t.Fatalf("after sweep %d sessions", len(s.t.sessions))
	}
}

func TestAllCancelsEarlierChildren(t *testing.T) {
	clk := newClock()
	r := NewRate(RateConfig{Rate: 1, Depth: 5, Now: clk.Now})
	c := newCounter(2)
	a := newAll(r, c)
	if count(a, 1, 5) != 2 {
		t.Fatal("counter should limit to 2")
	}
	if tok := r.Tokens(); tok != 3 {
		t.Fatalf("rejected events kept tokens: %v left, want 3", tok)
	}
	sink.Done(a, 1, 0, 0)
	if c.InFlight() != 1 {
		t.Fatal("Done not forwarded")
	}
	sink.Cancel(a, 1)
	if c.InFlight() != 0 || r.Tokens() != 4 {
		t.Fatal("Cancel not forwarded")
	}
	th := newThreshold(1)
	a2 := newAll(th, c)
	sink.Bind(a2, &lenSink{n: 5})
	if a2.Accept(1) {
		t.Fatal("Bind not forwarded")
	}
	if !a2.Accept(ev{must: true}) || c.InFlight() != 1 {
		t.Fatal("non-rejectable must pass and be charged")
	}
	m := inspectMap(a)
	if m["rejected"] != 3 || m["1.counter.rejected"] != 3 {
		t.Fatalf("inspect %v", m)
	}
	if len(a.Children()) != 2 {
		t.Fatal("children")
	}
}

func TestAnyChargesEveryChild(t *testing.T) {
	c1, c2 := newCounter(1), newCounter(5)
	a := newAny(c1, c2)
	if got := count(a, 1, 10); got != 5 {
		t.Fatalf("any of counters 1 and 5 admitted %d, want 5", got)
	}
	if c1.InFlight() != 5 || c2.InFlight() != 5 {
		t.Fatalf("both children charged: %d %d", c1.InFlight(), c2.InFlight())
	}
	for i := 0; i < 5; i++ {
		sink.Done(a, 1, 0, 0)
	}
	if c1.InFlight() != 0 || c2.InFlight() != 0 {
		t.Fatal("Done balances")
	}
	if m := inspectMap(a); m["accepted"] != 5 || m["rejected"] != 5 {
		t.Fatalf("inspect %v", m)
	}
	if newAny().Accept(1) || !newAll().Accept(1) {
		t.Fatal("empty any rejects, empty all accepts")
	}
}

func TestWalk(t *testing.T) {
	rt, err := NewResponseTime(RTConfig{Target: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := newAll(newThreshold(1), newSession(rt, SessionConfig{}))
	var names []string
	sink.Walk(p, func(x sink.Predicate) { names = append(names, sink.PredicateName(x)) })
	if len(names) != 4 || names[3] != "rt" {
		t.Fatalf("walk %v", names)
	}
}

func TestRateChangeKeepsTokenCount(t *testing.T) {
	tests := []struct {
		name          string
		from, to      float64
		depth         int
		drain         int // tokens taken before the change
		wantAfterward int // admitted right after the change
	}{
		// Drained at 0.05/s the bucket lacks 10 tokens = 200 s; at 1000/s
		// those 10 tokens take 10 ms, not 200 s.
		{"low to high, drained", 0.05, 1000, 10, 10, 0},
		{"high to low, half full", 1000, 1, 10, 5, 5},
		{"low to high, half full", 1, 1000, 10, 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			r := NewRate(RateConfig{Rate: tt.from, Depth: tt.depth, Now: clk.Now})
			if got := count(r, 1, tt.drain); got != tt.drain {
				t.Fatalf("drain admitted %d", got)
			}
			r.SetRate(tt.to)
			if got := count(r, 1, 100); got != tt.wantAfterward {
				t.Fatalf("right after the change admitted %d, want %d", got, tt.wantAfterward)
			}
			clk.Advance(time.Duration(float64(tt.depth) / tt.to * float64(time.Second)))
			if got := count(r, 1, 100); got != tt.depth {
				t.Fatalf("one refill time at the new rate later admitted %d, want %d", got, tt.depth)
			}
		})
	}
}

// TestSessionTableSharedAcrossStages: two stages' session predicates on one
// table treat a session the same: admitted at the first, it is admitted at
// the second although the second's own regulator is shut; turned away at
// the first, it is turned away at the second although the second would
// admit it.
func TestSessionTableSharedAcrossStages(t *testing.T) {
	clk := newClock()
	shared := NewShared()
	table, err := shared.SessionTable("shop", time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := shared.SessionTable("shop", 0, 0); err == nil || again != nil {
		t.Fatalf("a second declaration with another window: %v, %v; want a conflict", again, err)
	}
	if again, err := shared.SessionTable("shop", time.Second, 100000); err != nil || again != table {
		t.Fatalf("the same declaration again: %v, %v", again, err)
	}
	front := newSession(newCounter(1), SessionConfig{Now: clk.Now, Table: table}) // admits one session
	shut := sink.PredicateFunc(func(sink.Event) bool { return false })
	back := newSession(shut, SessionConfig{Now: clk.Now, Table: table})             // admits nothing new
	open := newSession(newCounter(1000), SessionConfig{Now: clk.Now, Table: table}) // admits everything new
	if !front.Accept(ev{id: "alice"}) || front.Accept(ev{id: "bob"}) {
		t.Fatal("front: want alice admitted, bob turned away")
	}
	if !back.Accept(ev{id: "alice"}) {
		t.Fatal("back turned away alice, whom the front admitted")
	}
	if open.Accept(ev{id: "bob"}) {
		t.Fatal("a stage admitted bob, whom the front turned away")
	}
	if open.Accept(ev{id: "carol"}) != true || !front.Accept(ev{id: "carol"}) {
		t.Fatal("carol, admitted by one stage, must be admitted by the others")
	}
	clk.Advance(2 * time.Second) // decisions expire with the window
	if !open.Accept(ev{id: "bob"}) {
		t.Fatal("bob's rejection outlived the window")
	}
	front.Forget("bob")
	if back.Accept(ev{id: "bob"}) {
		t.Fatal("after Forget, bob must be decided anew (back admits nothing new)")
	}
	// A private table is not shared.
	lone := newSession(shut, SessionConfig{Now: clk.Now})
	if lone.Accept(ev{id: "carol"}) {
		t.Fatal("a session predicate with its own table used the shared decisions")
	}
}

// TestRateShards: a sharded bucket keeps the totals of the exact one: a
// full bucket admits its whole depth at once (one producer reaches every
// shard), then tokens come back at the configured rate; batches larger
// than a shard are admitted from several; depth caps the shards.
func TestRateShards(t *testing.T) {
	clk := newClock()
	r := NewRate(RateConfig{Rate: 1000, Depth: 100, Shards: 4, Now: clk.Now})
	if r.Shards() != 4 || r.EffectiveRate() != 1000 || r.Tokens() != 100 {
		t.Fatalf("shards %d rate %v tokens %v, want 4, 1000, 100", r.Shards(), r.EffectiveRate(), r.Tokens())
	}
	admitted := 0
	for i := 0; i < 200; i++ {
		if r.Accept(i) {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("a full bucket of depth 100 admitted %d of a burst of 200", admitted)
	}
	clk.Advance(50 * time.Millisecond) // 50 tokens at 1000/s
	admitted = 0
	for i := 0; i < 200; i++ {
		if r.Accept(i) {
			admitted++
		}
	}
	if admitted < 48 || admitted > 52 {
		t.Fatalf("50 ms at 1000/s admitted %d, want 50 (±2 for the shards' rounding)", admitted)
	}
	clk.Advance(time.Second)        // full again
	batch := make([]sink.Event, 40) // more than a shard's 25
	if !admitMany(r, batch) {
		t.Fatal("a batch of 40 refused by a full bucket of depth 100")
	}
	if !admitMany(r, batch) || admitMany(r, batch) {
		t.Fatal("want the second batch of 40 admitted and a third refused (20 tokens left)")
	}
	if got := r.Tokens(); got < 19.5 || got > 20.5 {
		t.Fatalf("tokens %v after 80 taken and the refused batch given back, want 20", got)
	}
	if n := NewRate(RateConfig{Rate: 1000, Depth: 2, Shards: 8}).Shards(); n != 2 {
		t.Fatalf("depth 2 with 8 shards asked: %d shards, want 2", n)
	}
	if n := NewRate(RateConfig{Rate: 1000, Depth: 100}).Shards(); n != 1 {
		t.Fatalf("default: %d shards, want one exact bucket", n)
	}
}
