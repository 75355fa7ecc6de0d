package haboob

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

// The Checksum handler reads its stage's rt p90, lowers its quality while
// the p90 exceeds the target, turns rt admission control on at the lowest
// quality and off again once the stage has recovered.
func TestChecksumDrivesAdmission(t *testing.T) {
	clock := time.Unix(2000, 0)
	now := func() time.Time { return clock }
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 10 * time.Millisecond, Mode: "thesis", NReq: 10, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	deg, err := enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{Min: 0.1, Interval: time.Second, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &checksum{log: slog.New(slog.DiscardHandler), args: checksumArgs{Admission: true}, deg: deg, now: now}
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
