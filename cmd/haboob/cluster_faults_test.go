package main

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsServer runs a NATS server in the test process on 127.0.0.1:port
// (-1: any free port).
func natsServer(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server did not start")
	}
	return s
}

// TestClusterNATSRestart runs a front and two workers as processes
// joined to an external NATS server, and restarts that server in the
// middle of a load: every request gets 200 or 503 (none hangs, none
// fails on the connection), and once the server is back the nodes
// rejoin and requests are served again.
func TestClusterNATSRestart(t *testing.T) {
	bin := buildHaboob(t)
	srv := natsServer(t, -1)
	url := srv.ClientURL()
	front := startNode(t, bin, "-config", clusterConfig, "-node", "front", "-nats", url, "-addr", "127.0.0.1:0", "-profiler", "")
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", url)
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", url)
	fronts := []*node{front}
	waitLogged(t, front, `msg="remote: replica joined"`)
	if ok, _ := loadFronts(t, fronts, 4, 40); ok == 0 {
		t.Fatal("nothing served before the restart")
	}

	done := make(chan struct{})
	var ok, unavailable int64
	go func() {
		defer close(done)
		ok, unavailable = loadFronts(t, fronts, 8, 600)
	}()
	time.Sleep(300 * time.Millisecond) // the load is on (not a pass/fail criterion)
	_, port, err := net.SplitHostPort(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	time.Sleep(time.Second) // down for a while: the front notices
	p, _ := strconv.Atoi(port)
	srv = natsServer(t, p)
	defer srv.Shutdown()
	<-done
	t.Logf("across the restart: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != 600 {
		t.Fatalf("%d × 200 and %d × 503 for 600 requests", ok, unavailable)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok, _ := loadFronts(t, fronts, 2, 10); ok > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing served after the server came back:\n%s", front.logged())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
