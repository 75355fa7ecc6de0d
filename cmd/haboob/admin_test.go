package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryAdminPort: a running haboob's -profiler address serves the
// admin endpoints of issue 27 — /healthz, /readyz, /config (the effective
// YAML), the dashboard, /metrics and pprof — and haboob -h says where
// they are.
func TestBinaryAdminPort(t *testing.T) {
	bin := buildHaboob(t)
	root := siteWith(t, "hello.txt", "hello\n")
	r := start(t, bin, "-config", writeConfig(t, root), "-addr", "127.0.0.1:0", "-profiler", "127.0.0.1:0")
	w := &logWatch{r: r}
	admin := "http://" + dashboardRE.FindStringSubmatch(w.waitFor(t, "haboob: profiler dashboard"))[1]
	if code, _ := get(t, "http://"+r.addr+"/hello.txt"); code != 200 {
		t.Fatalf("GET /hello.txt: %d", code)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/healthz", []string{"ok"}},
		{"/readyz", nil},
		{"/config", []string{"HttpRecv:", "Checksum:", "target: 200ms"}},
		{"/debug/sandstorm/", []string{"Sandstorm dashboard"}},
		{"/metrics", []string{"# TYPE", "HttpRecv"}},
		{"/debug/pprof/", []string{"goroutine"}},
	} {
		code, body := get(t, admin+tc.path)
		if code != 200 {
			t.Errorf("GET %s on the admin port: %d", tc.path, code)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(body, want) {
				t.Errorf("GET %s on the admin port: no %q in\n%.2000s", tc.path, want, body)
			}
		}
	}
	if code, _ := get(t, "http://"+r.addr+"/metrics"); code != 404 {
		t.Errorf("/metrics on the app port: %d, want 404 (it is on the admin port)", code)
	}
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}

	out, _ := exec.Command(bin, "-h").CombinedOutput()
	for _, want := range []string{"/healthz", "/readyz", "/config", "/metrics", "/debug/sandstorm/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("haboob -h does not say where %s is:\n%s", want, out)
		}
	}
}
