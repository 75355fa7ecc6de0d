package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestClusterWithNKey runs a front and a worker with -nats-nkey-file:
// /checksum/ works through the worker; a worker without the seed is
// refused at start, and no process logs the seed.
func TestClusterWithNKey(t *testing.T) {
	bin := buildHaboob(t)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(t.TempDir(), "cluster.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	front := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "",
		"-nats-nkey-file", seedFile)
	worker := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats, "-nats-nkey-file", seedFile)
	checksumThrough(t, front)
	out, err := exec.Command(bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refused this node") {
		t.Fatalf("a worker without the seed: %v\n%s", err, out)
	}
	for _, log := range []string{front.logged(), worker.logged(), string(out)} {
		if strings.Contains(log, string(seed)) {
			t.Fatalf("the seed is in the logs:\n%s", log)
		}
	}
}
