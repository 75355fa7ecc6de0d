package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/natstest"
)

// durableCluster is the durable-mode cluster of the fault tests:
// Checksum as a JetStream work queue (ack wait 2s) whose handler is slow
// (work bytes hashed per request, no degrading, no admission refusals).
func durableCluster(t *testing.T, work string) string {
	return clusterVariant(t,
		"remote: {mode: request, timeout: 2s, idempotent: true}", "remote: {mode: durable, timeout: 2s}",
		"work: 1MiB ", "work: "+work+" ",
		"minQuality: 0.05", "minQuality: 1",
		"admission: true ", "admission: false ",
		// A redelivered event waits out the ack wait (2s) and then the
		// other worker's queue: on a loaded machine (these tests run
		// beside others) that can pass the shipped 5s, and a late reply
		// would look like a lost one. A lost reply still gets its 503.
		"responseTimeout: 5s", "responseTimeout: 15s")
}

// startDurableCluster starts the durable cluster of the fault tests (a
// front and two workers, each with its profiler), the front embedding
// the NATS server, or joining the one at natsURL if that is set; the
// victim joins NATS at join(the server's URL). Each request costs the
// other worker 16 MiB hashed, the victim victimWork: a slow victim (8×,
// 128MiB) holds most of the events in flight under a closed-loop load, so
// that it holds events whenever the fault strikes it. It serves a few
// requests and returns the nodes and the event counts so far.
func startDurableCluster(t *testing.T, natsURL, victimWork string, join func(url string) string) (front, victim, other *node, before eventCounts) {
	t.Helper()
	bin := buildHaboob(t)
	cfg, slow := durableCluster(t, "16MiB"), durableCluster(t, victimWork)
	nats := []string{"-nats-listen", "127.0.0.1:0"}
	if natsURL != "" {
		nats = []string{"-nats", natsURL}
	}
	front = startNode(t, bin, append([]string{"-config", cfg, "-node", "front", "-addr", "127.0.0.1:0", "-profiler", "127.0.0.1:0"}, nats...)...)
	victim = startNode(t, bin, "-config", slow, "-node", "worker", "-nats", join(front.nats), "-profiler", "127.0.0.1:0")
	other = startNode(t, bin, "-config", cfg, "-node", "worker", "-nats", front.nats, "-profiler", "127.0.0.1:0")
	const warmUp = 8
	if ok, _ := loadFronts(t, []*node{front}, 4, warmUp); ok != warmUp {
		t.Fatalf("%d of %d served before the load", ok, warmUp)
	}
	// The counts come from the profilers' samples, up to a second old:
	// read them until they show the warm-up's events stored and handled,
	// or the fault's counts would start from a front's or a worker's
	// count that misses some of them.
	deadline := time.Now().Add(30 * time.Second) // a hang guard only
	for before = countEvents(t, front, victim, other); before.sent < warmUp || before.handled < before.sent; before = countEvents(t, front, victim, other) {
		if time.Now().After(deadline) {
			t.Fatalf("the profilers never showed the %d events of the warm-up stored and handled: %+v", warmUp, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return front, victim, other, before
}

// slowVictim is the work per request of a victim that must hold events
// when the fault strikes it: eight times the other worker's.
const slowVictim = "128MiB"

// faultUnderLoad sends requests from 8 clients through front and, once
// victim handles events of that load, strikes; the load ends after
// another `after` requests. It returns the answers (every one 200 or 503;
// a transport error fails the test) and how many requests were sent.
// The victim's count comes from its profiler's samples, up to a second
// old: the load goes on until the fault has struck, whenever that is.
func faultUnderLoad(t *testing.T, front, victim *node, after int, strike func()) (ok, unavailable int64, total int) {
	t.Helper()
	start := handledBy(t, victim)
	return loadAcross(t, []*node{front}, 8, after, func(*load) bool { return handledBy(t, victim) >= start+4 }, strike)
}

// untilServing sends a few requests through front at a time until the
// worker w, back from a fault, handles some of them. (Each is answered,
// 200 or 503: a request meeting the worker as it rejoins may wait for
// the front's response timeout, while its event is still handled.)
func untilServing(t *testing.T, front, w *node, who string) {
	t.Helper()
	start := handledBy(t, w)
	deadline := time.Now().Add(60 * time.Second)
	for handledBy(t, w) <= start {
		if time.Now().After(deadline) {
			t.Fatalf("%s handles nothing:\n%s", who, w.logged())
		}
		if ok, unavailable := loadFronts(t, []*node{front}, 4, 8); ok != 8 {
			t.Logf("%d × 200, %d × 503 for 8 requests while %s rejoins", ok, unavailable, who)
		}
	}
}

var remoteEventsRE = regexp.MustCompile(`(?m)^sandstorm_remote_events\{[^}]*stage="Checksum"[^}]*\} (\S+)`)

// eventCounts says what became of the Checksum events: those the
// front's remote sink had stored in the stream or had refused, and those
// the workers had handled; and the requests the front answered 503 at
// its response timeout.
type eventCounts struct{ sent, refused, handled, timedOut int }

var responseTimeoutsRE = regexp.MustCompile(`(?m)^sandstorm_http_timeouts_total\{[^}]*kind="response"[^}]*\} (\S+)`)

func countEvents(t *testing.T, front *node, workers ...*node) eventCounts {
	t.Helper()
	c := eventCounts{sent: int(metric(t, front, remoteEventsRE)), refused: int(max(metric(t, front, remoteRejectedRE), 0)),
		timedOut: int(max(metric(t, front, responseTimeoutsRE), 0))}
	if c.sent < 0 {
		t.Fatal("the front reports no sandstorm_remote_events for Checksum")
	}
	for _, w := range workers {
		c.handled += handledBy(t, w)
	}
	return c
}

func (c eventCounts) minus(d eventCounts) eventCounts {
	return eventCounts{c.sent - d.sent, c.refused - d.refused, c.handled - d.handled, c.timedOut - d.timedOut}
}

// checkNothingLost checks, in durable mode, that every request of the
// fault's load was answered 200, or 503 for an event the stream refused
// (full, or the front cut off from NATS: the front's sink counts it), and
// that the workers handled every event the front stored since before at
// least once, logging the duplicates (handled again after a redelivery)
// they counted. (Requests are not events: the front's page cache answers
// a repeated URL itself.) A request whose event was handled but whose
// reply was lost would be answered 503 at the front's response timeout,
// not a refusal: it fails the check. It returns the counts.
//
// The counts come from the profilers' samples (one a second): they are
// read again until they account for the load, or for 30s.
func checkNothingLost(t *testing.T, ok, unavailable int64, total int, before eventCounts, front *node, workers ...*node) eventCounts {
	t.Helper()
	var c eventCounts
	deadline := time.Now().Add(30 * time.Second) // redeliveries of the last events may still be on their way
	for {
		c = countEvents(t, front, workers...).minus(before)
		accounted := c.sent+c.refused >= total // the samples have caught up with the load
		if accounted && c.handled >= c.sent && unavailable <= int64(c.refused) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c.handled < c.sent {
		t.Fatalf("the workers handled %d events of the %d the front stored", c.handled, c.sent)
	}
	if ok+unavailable != int64(total) || unavailable > int64(c.refused) {
		t.Fatalf("%d × 200 and %d × 503 for %d requests, %d events refused by the stream, %d requests answered at the response timeout: accepted events or their replies were lost",
			ok, unavailable, total, c.refused, c.timedOut)
	}
	t.Logf("%d events stored, %d refused, %d handled: %d duplicates (handled again after a redelivery); %d requests answered 503 at the response timeout",
		c.sent, c.refused, c.handled, c.handled-c.sent, c.timedOut)
	return c
}

// TestClusterDurableWorkerStopped: in durable mode, a worker SIGSTOPped
// while it holds events under load, then SIGCONTed: every request is
// answered, 200 (its events redelivered to the other worker after the
// ack wait) or 503 for an event the full stream refused, every stored
// event handled at least once, and the resumed worker serves again.
func TestClusterDurableWorkerStopped(t *testing.T) {
	front, victim, other, before := startDurableCluster(t, "", slowVictim, func(url string) string { return url })
	ok, unavailable, total := faultUnderLoad(t, front, victim, 150, func() {
		if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("durable, a worker stopped: %d × 200, %d × 503", ok, unavailable)
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if r := metricAbove(t, other, remoteRedeliveredRE, 0); r <= 0 {
		t.Errorf("the other worker reports %d redeliveries; the stopped worker's events should have come to it", r)
	}
	// The resumed worker finishes what it held (duplicates, counted
	// below) and takes its share again.
	untilServing(t, front, victim, "the resumed worker")
	checkNothingLost(t, ok, unavailable, total, before, front, victim, other)
}

// TestClusterDurablePartitionedWorker: in durable mode, the NATS
// connection of a worker holding events under load is closed and its
// reconnections refused (a partition of that worker alone): every request
// is answered, 200 or 503 for an event the full stream refused, every
// stored event handled at least once, and once the partition heals the
// worker rejoins and serves again.
func TestClusterDurablePartitionedWorker(t *testing.T) {
	var link *natstest.Link
	front, victim, other, before := startDurableCluster(t, "", slowVictim, func(url string) string {
		link = natstest.NewLink(t, url)
		return link.URL()
	})
	ok, unavailable, total := faultUnderLoad(t, front, victim, 150, link.Cut)
	t.Logf("durable, a worker partitioned: %d × 200, %d × 503", ok, unavailable)
	if r := metricAbove(t, other, remoteRedeliveredRE, 0); r <= 0 {
		t.Errorf("the other worker reports %d redeliveries; the partitioned worker's events should have come to it", r)
	}
	link.Heal()
	untilServing(t, front, victim, "the worker whose partition healed")
	checkNothingLost(t, ok, unavailable, total, before, front, victim, other)
}

// TestClusterPartitionedWorker: in request mode, a worker's NATS
// connection is closed under load and its reconnections refused: every
// request gets 200 or 503 (none hangs: the front takes the worker out of
// rotation and logs it, the other worker serves), and once the partition
// heals the worker comes back into rotation.
func TestClusterPartitionedWorker(t *testing.T) {
	bin := buildHaboob(t)
	front := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "")
	link := natstest.NewLink(t, front.nats)
	victim := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", link.URL(), "-profiler", "127.0.0.1:0")
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats)
	if ok, _ := loadFronts(t, []*node{front}, 4, 40); ok == 0 {
		t.Fatal("nothing served before the partition")
	}
	ok, unavailable, total := faultUnderLoad(t, front, victim, 1000, link.Cut)
	t.Logf("request mode, a worker partitioned: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != int64(total) || ok == 0 {
		t.Fatalf("%d × 200 and %d × 503 for %d requests", ok, unavailable, total)
	}
	waitLogged(t, front, `out of rotation" node=front replica=worker`)
	link.Heal()
	waitLogged(t, front, `msg="remote: replica answering again: back in rotation"`)
	if got := front.logged(); strings.Contains(got, "request not answered in time") {
		t.Errorf("a request waited for the response timeout:\n%s", got)
	}
}
