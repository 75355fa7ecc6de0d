package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/browsertest"
	"github.com/sandstorm-go/sandstorm/profiler"
)

// TestDashboardIdleSaysNoSamples loads the dashboard of a Haboob that
// served requests and then went idle, in headless Chromium: the p90
// plots' legends and the table say "no samples" for the idle stages
// instead of repeating the last busy window's value.
func TestDashboardIdleSaysNoSamples(t *testing.T) {
	browser := browsertest.New(t) // skips without chromium
	_, p, addr := runHaboob(t, 100*time.Millisecond)
	for range 20 {
		if code, _ := get(t, "http://"+addr+"/about.html"); code != 200 {
			t.Fatalf("GET /about.html: %d", code)
		}
	}
	s, _ := p.Latest()
	browsertest.WaitSample(t, p, s.Seq+3) // windows with no request
	dom := browser.DOM("http://" + p.Addr().String() + profiler.DashboardPath)
	browsertest.SaveArtifact(t, "haboob-dashboard-idle.html", []byte(dom))
	for _, want := range []string{"HttpRecv: no samples", `<td class="idle">no samples</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the idle dashboard has no %q: %s", want, browsertest.Body(dom))
		}
	}
}
