package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterFrontSurvivesHostileClients runs the cluster's HTTP front
// (the node that hosts HttpRecv and reaches Checksum on a worker over
// NATS) under `prlimit --nofile=512` beside one worker. A client that
// pipelines requests for a large file and never reads does not stop the
// front serving others, pages or remote stages; connections beyond the
// descriptor limit make accept fail, a held connection is still served,
// through the worker too; once they close, new connections are served.
func TestClusterFrontSurvivesHostileClients(t *testing.T) {
	prlimit := prlimitPath(t)
	bin := buildHaboob(t)
	root := siteWith(t, "index.html", "home")
	writeHuge(t, root)
	text, err := os.ReadFile(clusterConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(text), "shutdown: 10s", "shutdown: 2s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	front := start(t, prlimit, "--nofile=512", bin, "-config", cfg, "-node", "front", "-root", root,
		"-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "")
	natsURL := ""
	for natsURL == "" {
		line, ok := <-front.logs
		if !ok {
			t.Fatal("front exited")
		}
		if m := joinedRE.FindStringSubmatch(line); m != nil {
			natsURL = m[1]
		}
	}
	startNode(t, bin, "-config", cfg, "-node", "worker", "-nats", natsURL)
	base := "http://" + front.addr
	if code, _ := get(t, base+"/checksum/x"); code != 200 {
		t.Fatalf("/checksum/ through the worker: %d", code)
	}

	// A client that never reads, its pipeline full of large-file requests.
	stuck, err := net.Dial("tcp", front.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if tc, ok := stuck.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprint(stuck, strings.Repeat("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n", 8))
	if code, body := get(t, base+"/index.html"); code != 200 || body != "home" {
		t.Fatalf("a page while a client does not read: %d %q", code, body)
	}
	if code, _ := get(t, base+"/checksum/x"); code != 200 {
		t.Fatalf("/checksum/ while a client does not read: %d", code)
	}

	held := dialHeld(t, front.addr)
	held.ask(t, "held connection before", "/index.html")
	held.ask(t, "held connection before", "/checksum/x")

	closeAll := exhaustDescriptors(t, front)
	held.ask(t, "held connection out of descriptors", "/index.html")
	held.ask(t, "held connection out of descriptors", "/checksum/x")
	closeAll()
	stuck.Close()

	waitServingAgain(t, base+"/checksum/x")
	held.Close()
	if code := front.stop(t); code != 0 {
		t.Fatalf("front exit code %d", code)
	}
	for line := range front.logs {
		if strings.Contains(line, "stopped unexpectedly") || strings.Contains(line, "level=ERROR") {
			t.Errorf("front logged: %s", line)
		}
	}
}
