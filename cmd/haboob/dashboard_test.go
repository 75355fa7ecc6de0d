package main

import (
	"context"
	"io"
	"log/slog"
	nethttp "net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/internal/browsertest"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// haboobStages are the stages configs/haboob.yaml builds: its five
// handlers and the asynchronous file layer's stage.
var haboobStages = []string{"HttpRecv", "PageCache", "CacheMiss", "HttpSend", "Checksum", "aio.file"}

// runHaboob starts Haboob in the test's process as serve does (build: the
// embedded configuration, the bundled site, the profiler from
// global.profiler) with the web server and the dashboard on free loopback
// ports, and stops it when the test ends.
func runHaboob(t *testing.T, interval time.Duration) (*stage.Manager, *profiler.Profiler, string) {
	t.Helper()
	root := t.TempDir()
	if err := haboob.ExtractSite(haboob.BundledSite(), root); err != nil {
		t.Fatal(err)
	}
	cfg, err := stage.ParseConfig(configs.Haboob, configs.HaboobFile)
	if err != nil {
		t.Fatal(err)
	}
	in, err := build(slog.New(slog.DiscardHandler), cfg, root, "127.0.0.1:0", func(pcfg *profiler.Config) {
		if pcfg.HTTP != "127.0.0.1:9090" {
			t.Errorf("configs/haboob.yaml serves the dashboard on %q, want 127.0.0.1:9090", pcfg.HTTP)
		}
		pcfg.HTTP, pcfg.Interval, pcfg.Enabled = "127.0.0.1:0", interval, false
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.start(); err != nil {
		t.Fatal(err)
	}
	if in.p.Addr() == nil {
		t.Fatal("the profiler's dashboard did not start")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := in.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return in.m, in.p, in.hb.Addr().String()
}

// browse keeps clients requesting static pages, a missing one and the
// dynamic Checksum page from addr until the test ends, about 150 requests
// a second.
func browse(t *testing.T, addr string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after cancel: cleanups run last-in first-out
	t.Cleanup(cancel)
	paths := []string{"/", "/about.html", "/style.css", "/img/haboob.png", "/docs/", "/checksum/x", "/nope"}
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &nethttp.Transport{}
			defer tr.CloseIdleConnections()
			client := &nethttp.Client{Transport: tr, Timeout: 10 * time.Second}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := c; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				req, err := nethttp.NewRequestWithContext(ctx, nethttp.MethodGet, "http://"+addr+paths[i%len(paths)], nil)
				if err != nil {
					panic(err)
				}
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
}

// TestDashboardOfRunningHaboob loads the dashboard of a running Haboob,
// under traffic, in headless Chromium: the page names every stage the
// manager has, in the table, the plot legends and the stage graph, and its
// plots move (a later load holds more samples; the page updated itself
// while open). The screenshot is saved as haboob-dashboard.png in
// $SANDSTORM_ARTIFACTS (docs/dashboard.png is one).
func TestDashboardOfRunningHaboob(t *testing.T) {
	browser := browsertest.New(t) // skips without chromium
	m, p, addr := runHaboob(t, 250*time.Millisecond)
	if code, body := get(t, "http://"+addr+"/"); code != 200 || len(body) == 0 {
		t.Fatalf("GET /: %d", code)
	}
	browse(t, addr)

	browsertest.WaitSample(t, p, 8)
	var names []string
	for _, st := range m.Stages() {
		names = append(names, st.Name())
	}
	for _, n := range haboobStages {
		if !slices.Contains(names, n) {
			t.Fatalf("Haboob has no stage %s (stages: %v)", n, names)
		}
	}
	browser.CheckLiveDashboard(p, names, 4, "haboob-dashboard")
}
