package configs_test

import (
	"context"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// The file on disk and the embedded copy are the same document.
func TestEmbeddedMatchesFile(t *testing.T) {
	data, err := os.ReadFile("haboob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(configs.Haboob) {
		t.Fatal("configs.Haboob differs from haboob.yaml")
	}
}

// TestHaboobConfig is a golden check of the default Haboob configuration:
// the stage names and handlers (a contract), the addresses, and that it
// loads with Haboob's registry.
func TestHaboobConfig(t *testing.T) {
	cfg, err := stage.ParseConfig(configs.Haboob, configs.HaboobFile)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ stage, handler string }{
		{"HttpRecv", "haboob.HttpRecv"},
		{"PageCache", "haboob.PageCache"},
		{"CacheMiss", "haboob.CacheMiss"},
		{"HttpSend", "haboob.HttpSend"},
		{"Checksum", "haboob.Checksum"},
	}
	if len(cfg.Stages) != len(want) {
		t.Fatalf("%d stages, want %d", len(cfg.Stages), len(want))
	}
	for i, w := range want {
		if got := cfg.Stages[i]; got.Name != w.stage || got.Config.Handler != w.handler {
			t.Errorf("stage %d = %s (%s), want %s (%s)", i, got.Name, got.Config.Handler, w.stage, w.handler)
		}
	}
	if cfg.Global.Shutdown != 10*time.Second {
		t.Errorf("global.shutdown = %v", cfg.Global.Shutdown)
	}
	if !cfg.Global.ThreadPool.Controller.Enabled {
		t.Error("thread-pool controllers are off")
	}

	hb := haboob.New(haboob.Options{})
	reg := stage.NewRegistry()
	hb.Register(reg)
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := profiler.ConfigFrom(m)
	if err != nil {
		t.Fatal(err)
	}
	if pc.HTTP != "127.0.0.1:9090" {
		t.Errorf("profiler http = %q, want 127.0.0.1:9090", pc.HTTP)
	}
	ac, err := aio.ConfigOf(m)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := ac.Socket("http"); !ok || s.Addr != "127.0.0.1:8080" {
		t.Errorf("socket http = %+v %v, want 127.0.0.1:8080", s.Addr, ok)
	}
	for _, w := range want {
		if _, ok := m.Stage(w.stage); !ok {
			t.Errorf("stage %s not created", w.stage)
		}
	}
	if st, _ := m.Stage("Checksum"); st.Sink().Predicate() == nil {
		t.Error("Checksum has no predicate")
	}
}

// The default configuration runs (on a free port) and serves a page.
func TestHaboobConfigServes(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	hb := haboob.New(haboob.Options{Root: root, Addr: "127.0.0.1:0"})
	reg := stage.NewRegistry()
	hb.Register(reg)
	m, err := stage.Parse(configs.Haboob, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		_ = hb.Close()
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := hb.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	tr := &nethttp.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&nethttp.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + hb.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}
