package main

import (
	"bytes"
	"io"
	nethttp "net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
)

// TestPrometheusExpositionPassesPromtool runs `promtool check metrics`
// (Debian package prometheus) on the /metrics of a running Haboob that has
// served some requests: names, types, units and HELP texts must pass its
// lint. It skips when promtool is not installed.
func TestPrometheusExpositionPassesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	_, p, addr := runHaboob(t, time.Hour)
	for _, path := range []string{"/", "/missing", "/index.html"} {
		resp, err := nethttp.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	p.Sample() // a fresh sample with the requests' counts
	resp, err := nethttp.Get("http://" + p.Addr().String() + profiler.PrometheusPath)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for _, want := range []string{
		`sandstorm_http_responses_total{code="2xx",server="http"}`,
		`sandstorm_stage_service_seconds_bucket{stage="HttpRecv",le="0.001"}`,
		`sandstorm_stage_rejected_events_total{reason="predicate",stage="PageCache"}`,
		`sandstorm_aio_received_bytes_total{socket="http"}`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if bytes.Contains(body, []byte("sandstorm_http_http_")) {
		t.Error("/metrics still has the doubled sandstorm_http_http_ prefix")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, strings.TrimSpace(string(out)))
	}
}
