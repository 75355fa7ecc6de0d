package main

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/natstest"
)

// TestClusterNATSRestart runs a front and two workers as processes
// joined to an external NATS server, and restarts that server in the
// middle of a load: every request gets 200 or 503 (none hangs, none
// fails on the connection), and once the server is back the nodes
// rejoin and requests are served again.
func TestClusterNATSRestart(t *testing.T) {
	bin := buildHaboob(t)
	srv := natstest.Start(t, natstest.Config{})
	url := srv.URL()
	front := startNode(t, bin, "-config", clusterConfig, "-node", "front", "-nats", url, "-addr", "127.0.0.1:0", "-profiler", "")
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", url)
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", url)
	fronts := []*node{front}
	waitLogged(t, front, `msg="remote: replica joined"`)
	if ok, _ := loadFronts(t, fronts, 4, 40); ok == 0 {
		t.Fatal("nothing served before the restart")
	}

	// The server stops once 40 requests of the load are answered, and
	// the load goes on until 200 more were sent after its restart.
	ok, unavailable, total := loadAcross(t, fronts, 8, 200, func(l *load) bool { return l.answered() >= 40 }, func() {
		srv.Stop()
		time.Sleep(time.Second) // down for a while: the front notices (not a pass/fail criterion)
		srv.Restart()
	})
	t.Logf("across the restart: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != int64(total) {
		t.Fatalf("%d × 200 and %d × 503 for %d requests", ok, unavailable, total)
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

// TestClusterDurableNATSRestart: in durable mode, the NATS server (run
// by the test, its JetStream store in a folder the restart keeps) is
// stopped and started again while a front and two workers are under
// load: every request is answered (none hangs), 200 or 503 for an event
// the stream refused while the front was cut off; every request whose
// event was handled gets its 200 (a worker's reply made while it was cut
// off waits for its link and for the front to come back: none is answered
// at the front's response timeout); every event the stream stored is
// handled at least once (the duplicates counted), and the nodes serve
// again once the server is back.
func TestClusterDurableNATSRestart(t *testing.T) {
	srv := natstest.Start(t, natstest.Config{StoreDir: t.TempDir()})
	// The fault strikes every node alike: the "victim" is a worker like
	// the other (a slow one would only slow the load down).
	front, victim, other, before := startDurableCluster(t, srv.URL(), "16MiB", func(url string) string { return url })

	ok, unavailable, total := faultUnderLoad(t, front, victim, 100, func() {
		srv.Stop()
		time.Sleep(time.Second) // down for a while: the nodes notice (not a pass/fail criterion)
		srv.Restart()
	})
	t.Logf("durable, the NATS server restarted: %d × 200, %d × 503", ok, unavailable)
	// Checked before more requests, which could be refused as well.
	c := checkNothingLost(t, ok, unavailable, total, before, front, victim, other)
	if c.timedOut != 0 {
		t.Fatalf("%d requests answered 503 at the front's response timeout: their replies were lost", c.timedOut)
	}
	untilServing(t, front, victim, "a worker after the restart")
}
