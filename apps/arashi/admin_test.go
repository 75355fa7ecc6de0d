package arashi_test

import (
	"io"
	nethttp "net/http"
	"strings"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/profiler"
)

// TestProfilerAdminPort: Config.Profiler (the command's -profiler) opens
// the same admin port as Haboob's: dashboard, /healthz, /readyz, /config.
func TestProfilerAdminPort(t *testing.T) {
	svc := startConfig(t, arashi.Config{Profiler: "127.0.0.1:0"})
	p := svc.Profiler()
	if p == nil || p.Addr() == nil {
		t.Fatal("no profiler listening")
	}
	base := "http://" + p.Addr().String()
	for path, want := range map[string]string{
		profiler.DashboardPath: "Sandstorm dashboard",
		profiler.HealthzPath:   "ok",
		profiler.ReadyzPath:    "ok",
		profiler.ConfigPath:    "http: 127.0.0.1:0",
	} {
		resp, err := nethttp.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s, want 200 with %q; body %.300s", path, resp.Status, want, body)
		}
	}
}
