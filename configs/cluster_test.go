package configs_test

import (
	"os"
	"testing"

	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestHaboobClusterConfig checks the contract of haboob-cluster.yaml: the
// front node hosts HTTP, the page cache and the file stages and embeds
// NATS; worker nodes host Checksum only.
func TestHaboobClusterConfig(t *testing.T) {
	data, err := os.ReadFile("haboob-cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(configs.HaboobCluster) {
		t.Fatal("configs.HaboobCluster differs from haboob-cluster.yaml")
	}
	cfg, err := stage.ParseConfig(configs.HaboobCluster, configs.HaboobClusterFile)
	if err != nil {
		t.Fatal(err)
	}
	cc, ok, err := remote.ClusterFrom(cfg)
	if err != nil || !ok {
		t.Fatalf("cluster block: %v %v", ok, err)
	}
	if cc.NATS != "" || cc.Listen == "" || cc.Node != "front" {
		t.Errorf("cluster = %+v: want front embedding NATS and listening", cc)
	}
	hosts := map[string]string{"HttpRecv": "front", "PageCache": "front", "CacheMiss": "front", "HttpSend": "front", "Checksum": "worker"}
	for _, ns := range cfg.Stages {
		want, ok := hosts[ns.Name]
		if !ok {
			t.Errorf("unexpected stage %s", ns.Name)
			continue
		}
		for _, node := range []string{"front", "worker"} {
			if got := ns.Config.HostedOn(node); got != (node == want) {
				t.Errorf("%s hosted on %s: %v", ns.Name, node, got)
			}
		}
	}
	if cfg.Stages[len(cfg.Stages)-1].Config.Handler != "haboob.Checksum" {
		t.Error("Checksum is not haboob.Checksum")
	}
}
