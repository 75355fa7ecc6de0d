package browsertest

import (
	"regexp"
	"strings"
	"testing"
)

// DashboardPlots is how many plots the profiler's dashboard draws (queue
// length, threads, throughput, rejections, service p90, queue wait p90).
const DashboardPlots = 6

var (
	statusLiveRE = regexp.MustCompile(`id="status"[^>]*>live<`)
	polylineRE   = regexp.MustCompile(`<polyline points="([^"]*)"[^>]*data-stage="([^"]*)"`)
)

// CheckDashboard checks the DOM of the profiler's dashboard
// (/debug/sandstorm/) after it polled the server: it is live, it lists
// exactly stages (in that order), names each of them in the table, the plot
// legends and the stage graph, and every plot has a line of at least two
// points for every stage. It returns how many samples the plots hold
// (<body data-samples>).
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
		if c := strings.Count(dom, ">"+n+"<"); c < DashboardPlots+2 {
			t.Errorf("stage %s is named %d times in the dashboard, want ≥ %d", n, c, DashboardPlots+2)
		}
		if !strings.Contains(dom, `<tr data-stage="`+n+`"`) {
			t.Errorf("stage %s has no table row", n)
		}
	}
	lines := map[string]int{}
	for _, l := range polylineRE.FindAllStringSubmatch(dom, -1) {
		if strings.Count(l[1], ",") < 2 {
			t.Errorf("a plot line of %s has fewer than 2 points: %q", l[2], l[1])
		}
		lines[l[2]]++
	}
	for _, n := range stages {
		if lines[n] != DashboardPlots {
			t.Errorf("stage %s has %d plot lines, want %d", n, lines[n], DashboardPlots)
		}
	}
	if len(lines) != len(stages) {
		t.Errorf("plot lines for %d stages, want %d: %v", len(lines), len(stages), lines)
	}
	return BodyInt(t, dom, "data-samples")
}
