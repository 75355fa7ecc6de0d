package haboob

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

func TestDegrader(t *testing.T) {
	const target = 100 * time.Millisecond
	type step struct {
		after     time.Duration // since the previous step
		p90       time.Duration
		quality   float64
		admission bool
	}
	tests := []struct {
		name  string
		cfg   DegraderConfig
		steps []step
	}{
		{"over target degrades, within an interval nothing changes", DegraderConfig{Min: 0.5, Decrease: 2, Increase: 0.1, Interval: time.Second}, []step{
			{time.Second, 2 * target, 0.5, false},
			{time.Millisecond, 2 * target, 0.5, false}, // too soon
			{time.Second, 2 * target, 0.5, false},      // at min, admission not allowed
			{time.Second, 0, 0.5, false},               // no measurement: no change
			{time.Second, target / 2, 0.6, false},      // under target: slow increase
			{time.Second, target, 0.7, false},          // at target counts as under
		}},
		{"admission at the lowest quality, off once well under target", DegraderConfig{Min: 0.25, Decrease: 2, Increase: 0.25, Interval: time.Second, Admission: true}, []step{
			{time.Second, 3 * target, 0.5, false},
			{time.Second, 3 * target, 0.25, false},
			{time.Second, 3 * target, 0.25, true},     // still too slow at min quality
			{time.Second, target * 3 / 4, 0.25, true}, // under target but not by half: keep rejecting
			{time.Second, target / 3, 0.25, false},    // recovered: admission off
			{time.Second, target / 3, 0.5, false},     // then quality climbs
			{time.Second, target / 3, 0.75, false},
			{time.Second, target / 3, 1, false},
			{time.Second, target / 3, 1, false}, // capped
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewDegrader(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			for i, s := range tt.steps {
				now = now.Add(s.after)
				q, admit := d.Update(now, s.p90, target)
				if q != s.quality || admit != s.admission || d.Quality() != q || d.Admission() != admit {
					t.Fatalf("step %d (p90 %v): quality %v admission %v, want %v %v", i, s.p90, q, admit, s.quality, s.admission)
				}
			}
		})
	}
}

func TestDegraderConfigErrors(t *testing.T) {
	for _, cfg := range []DegraderConfig{{Min: 2}, {Min: -1}, {Increase: 3}, {Decrease: 0.5}, {Interval: -time.Second}} {
		if _, err := NewDegrader(cfg); err == nil {
			t.Errorf("NewDegrader(%+v) accepted", cfg)
		}
	}
}

// The Checksum handler reads its stage's rt p90, lowers its quality while
// the p90 exceeds the target, turns rt admission control on at the lowest
// quality and off again once the stage has recovered.
func TestChecksumDrivesAdmission(t *testing.T) {
	clock := time.Unix(2000, 0)
	now := func() time.Time { return clock }
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 10 * time.Millisecond, Mode: enqueuepred.ModeThesis, NReq: 10, Now: now, Disabled: true})
	if err != nil {
		t.Fatal(err)
	}
	deg, err := NewDegrader(DegraderConfig{Min: 0.1, Interval: time.Second, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &checksum{log: slog.New(slog.DiscardHandler), args: checksumArgs{Admission: true}, rt: rt, deg: deg, now: now}
	complete := func(d time.Duration) {
		for range 10 {
			rt.Accept(nil)
			clock = clock.Add(time.Millisecond)
			rt.Done(nil, 0, d)
		}
	}
	complete(200 * time.Millisecond) // far over the 10ms target
	var q float64
	for i := 0; i < 100 && !rt.Enabled(); i++ {
		clock = clock.Add(time.Second)
		q = h.adjust()
	}
	if !rt.Enabled() || q != 0.1 {
		t.Fatalf("after overload: quality %v, admission %v; want 0.1 and on", q, rt.Enabled())
	}
	for i := 0; i < 100 && rt.P90() >= 5*time.Millisecond; i++ {
		complete(time.Millisecond)
	}
	clock = clock.Add(time.Second)
	h.adjust()
	if rt.Enabled() {
		t.Fatalf("admission still on with p90 %v", rt.P90())
	}
	clock = clock.Add(time.Second)
	if q := h.adjust(); q <= 0.1 {
		t.Fatalf("quality %v did not recover", q)
	}
}
