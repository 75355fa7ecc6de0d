package configs_test

import (
	"os"
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/gnutella"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/stage"
)

// configs/gnutella.yaml: the embedded copy is the file, the three stages
// of the thesis are there with their handlers, and it loads with the
// router's registry.
func TestGnutellaConfig(t *testing.T) {
	data, err := os.ReadFile("gnutella.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(configs.Gnutella) {
		t.Fatal("configs.Gnutella differs from gnutella.yaml")
	}
	cfg, err := stage.ParseConfig(configs.Gnutella, configs.GnutellaFile)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ stage, handler string }{
		{gnutella.StageServer, gnutella.HandlerServer},
		{gnutella.StageRouter, gnutella.HandlerRouter},
		{gnutella.StageCatcher, gnutella.HandlerCatcher},
	}
	if len(cfg.Stages) != len(want) {
		t.Fatalf("%d stages", len(cfg.Stages))
	}
	for i, w := range want {
		if got := cfg.Stages[i]; got.Name != w.stage || got.Config.Handler != w.handler {
			t.Errorf("stage %d = %s (%s), want %s (%s)", i, got.Name, got.Config.Handler, w.stage, w.handler)
		}
	}
	node := gnutella.New(gnutella.Options{})
	reg := stage.NewRegistry()
	node.Register(reg)
	if _, err := stage.NewFromConfig(cfg, reg, stage.Options{}); err != nil {
		t.Fatal(err)
	}
}
