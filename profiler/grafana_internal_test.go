package profiler

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboardUsesExportedNames: every metric the dashboard in
// docs/ queries is one the exposition produces.
func TestGrafanaDashboardUsesExportedNames(t *testing.T) {
	data, err := os.ReadFile("../docs/grafana-sandstorm.json")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{
		"sandstorm_stage_service_seconds":    true,
		"sandstorm_stage_queue_wait_seconds": true,
		"sandstorm_stage_batch_size_events":  true,
		"sandstorm_edge_events_total":        true,
	}
	for _, tbl := range []map[string]promMetric{stageMetrics, predicateMetrics, otherMetrics["aio"], otherMetrics["http"]} {
		for _, m := range tbl {
			known[m.name] = true
		}
	}
	used := regexp.MustCompile(`sandstorm_[a-z0-9_]+`).FindAllString(string(data), -1)
	if len(used) < 10 {
		t.Fatalf("the dashboard queries only %d metrics", len(used))
	}
	for _, n := range used {
		base := strings.TrimSuffix(n, "_bucket")
		if !known[base] {
			t.Errorf("the dashboard queries %s, which /metrics does not export", n)
		}
	}
}

func TestPromName(t *testing.T) {
	for in, want := range map[string]string{
		"queue.length":              "queue_length",
		"connections.connectFailed": "connections_connect_failed",
		"overLimit":                 "over_limit",
		"9lives":                    "_lives",
	} {
		if got := promName(in); got != want {
			t.Errorf("promName(%q) = %q, want %q", in, got, want)
		}
	}
}
