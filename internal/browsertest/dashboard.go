package browsertest

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
)

// DashboardPlots is how many plots the profiler's dashboard draws (queue
// length, threads, throughput, rejections, service p90, queue wait p90).
const DashboardPlots = 6

// dashboardIdlePlots are the plots whose lines break where a stage
// completed nothing in a sample's window (the p90s: "no samples").
var dashboardIdlePlots = map[string]bool{"p90": true, "wait": true}

var (
	statusLiveRE = regexp.MustCompile(`id="status"[^>]*>live<`)
	plotRE       = regexp.MustCompile(`<div class="plot" id="plot-([a-z0-9]+)"`)
	polylineRE   = regexp.MustCompile(`<polyline points="([^"]*)"[^>]*data-stage="([^"]*)"`)
	circleRE     = regexp.MustCompile(`<circle [^>]*data-stage="([^"]*)"`)
)

// CheckDashboard checks the DOM of the profiler's dashboard
// (/debug/sandstorm/) after it polled the server: it is live, it lists
// exactly stages (in that order), names each of them in the table, the plot
// legends and the stage graph, and every plot has a line for every stage: a
// single line of at least two points in the counter plots; in the p90
// plots, which break where a stage completed nothing, at least one line or
// dot, or "STAGE: no samples" in the legend. It returns how many samples
// the plots hold (<body data-samples>).
func CheckDashboard(t testing.TB, dom string, stages []string) int {
	t.Helper()
	if !statusLiveRE.MatchString(dom) {
		t.Errorf("dashboard status is not live: %s", Body(dom))
	}
	if got, _ := BodyAttr(dom, "data-stages"); got != strings.Join(stages, ",") {
		t.Errorf("dashboard data-stages = %q, want %q", got, strings.Join(stages, ","))
	}
	for _, n := range stages {
		// The table row, DashboardPlots legends and the graph's node.
		if c := strings.Count(dom, ">"+n+"<") + strings.Count(dom, ">"+n+": no samples<"); c < DashboardPlots+2 {
			t.Errorf("stage %s is named %d times in the dashboard, want ≥ %d", n, c, DashboardPlots+2)
		}
		if !strings.Contains(dom, `<tr data-stage="`+n+`"`) {
			t.Errorf("stage %s has no table row", n)
		}
	}
	plots := plotRE.FindAllStringSubmatchIndex(dom, -1)
	if len(plots) != DashboardPlots {
		t.Errorf("%d plots, want %d", len(plots), DashboardPlots)
	}
	known := map[string]bool{}
	for _, n := range stages {
		known[n] = true
	}
	for i, loc := range plots {
		id, end := dom[loc[2]:loc[3]], len(dom)
		if i+1 < len(plots) {
			end = plots[i+1][0]
		}
		plot := dom[loc[0]:end]
		lines, dots := map[string]int{}, map[string]int{}
		for _, l := range polylineRE.FindAllStringSubmatch(plot, -1) {
			if strings.Count(l[1], ",") < 2 {
				t.Errorf("plot %s: a line of %s has fewer than 2 points: %q", id, l[2], l[1])
			}
			lines[l[2]]++
		}
		for _, c := range circleRE.FindAllStringSubmatch(plot, -1) {
			dots[c[1]]++
		}
		for n := range lines {
			if !known[n] {
				t.Errorf("plot %s has a line for %s, not a listed stage", id, n)
			}
		}
		for _, n := range stages {
			switch {
			case !dashboardIdlePlots[id] && (lines[n] != 1 || dots[n] != 0):
				t.Errorf("plot %s: stage %s has %d lines and %d dots, want one line", id, n, lines[n], dots[n])
			case dashboardIdlePlots[id] && lines[n]+dots[n] == 0 && !strings.Contains(plot, ">"+n+": no samples<"):
				t.Errorf("plot %s: stage %s has no line, no dot and no \"no samples\" legend", id, n)
			}
		}
	}
	return BodyInt(t, dom, "data-samples")
}

// WaitSample waits until p has taken sample seq (a wait, not a
// measurement; the bound is a hang guard).
func WaitSample(t testing.TB, p *profiler.Profiler, seq uint64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s, _ := p.Latest(); s.Seq >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the profiler did not reach sample %d in 30 s", seq)
		}
	}
}

// CheckLiveDashboard loads p's dashboard and checks it (CheckDashboard
// with stages) and that the page updated itself while open; it waits for
// more samples, loads it again and checks that its plots moved (hold more
// samples). The first DOM is saved as name.html and a screenshot as
// name.png in ArtifactDir; it returns the first DOM and the dashboard's
// URL.
func (b *Browser) CheckLiveDashboard(p *profiler.Profiler, stages []string, more uint64, name string) (dom, url string) {
	t := b.t
	t.Helper()
	url = "http://" + p.Addr().String() + profiler.DashboardPath
	dom = b.DOM(url)
	SaveArtifact(t, name+".html", []byte(dom))
	first := CheckDashboard(t, dom, stages)
	if BodyInt(t, dom, "data-updates") < 1 {
		t.Errorf("the page did not update itself while open: %s", Body(dom))
	}

	s, _ := p.Latest()
	WaitSample(t, p, s.Seq+more)
	later := b.DOM(url)
	if n := CheckDashboard(t, later, stages); n <= first {
		t.Errorf("the plots did not move: %d samples, then %d", first, n)
	}
	t.Logf("dashboard: %s", Body(later))

	shot := filepath.Join(ArtifactDir(t), name+".png")
	b.Screenshot(url, shot, 1280, 1500)
	t.Logf("screenshot: %s", shot)
	return dom, url
}
