package main

import (
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterVariant writes configs/haboob-cluster.yaml with each old string
// replaced by its new one (every replacement must apply) and returns
// the file's path.
func clusterVariant(t *testing.T, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(clusterConfig)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(s, replace[i]) {
			t.Fatalf("%s holds no %q", clusterConfig, replace[i])
		}
		s = strings.Replace(s, replace[i], replace[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// metric returns a counter or gauge of a node running a profiler, read
// from its /metrics: the first sample whose line matches re (its value in
// the first group), or -1 if none does.
func metric(t *testing.T, n *node, re *regexp.Regexp) int64 {
	t.Helper()
	if n.prof == "" {
		t.Fatal("the node runs no profiler")
	}
	resp, err := nethttp.Get(strings.TrimSuffix(n.prof, "/debug/sandstorm/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := re.FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return int64(v)
}

// metricAbove reads a metric of n until it exceeds floor, for at most
// 30 s (a hang guard: the profiler exports counts it samples once a
// second, so a read made just after the event can be a second old), and
// returns the last value read.
func metricAbove(t *testing.T, n *node, re *regexp.Regexp, floor int64) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := metric(t, n, re)
		if v > floor || time.Now().After(deadline) {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vmRSS returns a process's resident set in KiB, from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no VmRSS in /proc/PID/status")
	}
	v, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return v
}

var remoteRejectedRE = regexp.MustCompile(`(?m)^sandstorm_remote_rejected\{[^}]*stage="Checksum"[^}]*\} (\S+)`)

// TestClusterSlowConsumer runs a front and one worker whose Checksum is
// slow (16 MiB hashed per request, no degrading) and whose queue holds 4
// events, and sends it far more than it can take: every request gets 200
// or 503 (none hangs), the worker's own admission refuses the excess at
// once, the front counts every refusal (remote rejected = the 503s), and
// neither process grows without bound.
func TestClusterSlowConsumer(t *testing.T) {
	bin := buildHaboob(t)
	cfg := clusterVariant(t,
		"work: 1MiB ", "work: 16MiB ",
		"minQuality: 0.05", "minQuality: 1",
		"admission: true ", "admission: false ",
		"queue: {threshold: 256}", "queue: {threshold: 4}")
	front := startNode(t, bin, "-config", cfg, "-node", "front", "-nats-listen", "127.0.0.1:0", "-addr", "127.0.0.1:0", "-profiler", "127.0.0.1:0")
	worker := startNode(t, bin, "-config", cfg, "-node", "worker", "-nats", front.nats)
	waitLogged(t, front, `msg="remote: replica joined"`)
	fronts := []*node{front}
	loadFronts(t, fronts, 2, 4) // warm up
	rejectedBefore := max(metric(t, front, remoteRejectedRE), 0)
	rssFront, rssWorker := vmRSS(t, front.cmd.Process.Pid), vmRSS(t, worker.cmd.Process.Pid)

	const total = 2000
	ok, unavailable := loadFronts(t, fronts, 32, total)
	t.Logf("slow consumer: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != total {
		t.Fatalf("%d × 200 and %d × 503 for %d requests", ok, unavailable, total)
	}
	if ok == 0 || unavailable == 0 {
		t.Fatalf("want some served and the excess refused: %d × 200, %d × 503", ok, unavailable)
	}
	// The profiler samples its gauges every second: wait for a sample
	// taken after the load.
	rejected := metric(t, front, remoteRejectedRE) - rejectedBefore
	for deadline := time.Now().Add(10 * time.Second); rejected < unavailable && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		rejected = metric(t, front, remoteRejectedRE) - rejectedBefore
	}
	if rejected != unavailable {
		t.Errorf("the front counted %d remote rejections for %d × 503", rejected, unavailable)
	}
	// Bounded memory: the refused requests left nothing behind. The
	// bound is loose (4× and 64 MiB over the start) and only catches
	// growth with the load.
	for _, p := range []struct {
		name   string
		n      *node
		before int64
	}{{"front", front, rssFront}, {"worker", worker, rssWorker}} {
		after := vmRSS(t, p.n.cmd.Process.Pid)
		t.Logf("%s RSS %d KiB → %d KiB", p.name, p.before, after)
		if after > 4*p.before+64<<10 {
			t.Errorf("%s RSS grew from %d KiB to %d KiB under %d requests", p.name, p.before, after, total)
		}
	}
}

var remoteRedeliveredRE = regexp.MustCompile(`(?m)^sandstorm_remote_redelivered\{[^}]*stage="Checksum"[^}]*\} (\S+)`)

// TestClusterDurableWorkerKilled runs Checksum in durable mode (a
// JetStream work queue, acknowledgement wait 2s) on two workers whose
// handler is slow (16 MiB hashed per request, no degrading), and
// SIGKILLs one of them while it holds events: every request is answered
// 200 (nothing the stream accepted is lost, none hangs), and the events
// the dead worker held were redelivered to the other one.
func TestClusterDurableWorkerKilled(t *testing.T) {
	front, victim, survivor, _ := startDurableCluster(t, "", slowVictim, func(url string) string { return url })
	ok, unavailable, total := faultUnderLoad(t, front, victim, 150, func() {
		if err := victim.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("durable, a worker killed: %d × 200, %d × 503", ok, unavailable)
	if ok != int64(total) {
		t.Fatalf("%d × 200 and %d × 503 for %d requests: accepted events were lost", ok, unavailable, total)
	}
	if r := metricAbove(t, survivor, remoteRedeliveredRE, 0); r <= 0 {
		t.Errorf("the survivor reports %d redeliveries; the victim's events should have come to it", r)
	}
}
