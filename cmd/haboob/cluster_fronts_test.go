package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	nethttp "net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var checksumHandledRE = regexp.MustCompile(`(?m)^sandstorm_stage_handled_events_total\{[^}]*stage="Checksum"[^}]*\} (\d+)`)

// handledBy returns how many events the Checksum stage of a worker
// running a profiler has handled, read from its /metrics.
func handledBy(t *testing.T, w *node) int {
	t.Helper()
	return int(max(metric(t, w, checksumHandledRE), 0))
}

// loadFronts sends total GET /checksum/ requests over clients
// connections, spread over the fronts in turn, and counts the answers.
// A transport error or a status other than 200 and 503 is reported. The
// slowest answer's time is logged (a measurement, not a criterion).
func loadFronts(t *testing.T, fronts []*node, clients, total int) (ok, unavailable int64) {
	t.Helper()
	l := &load{}
	l.limit.Store(int64(total))
	l.run(t, fronts, clients)
	return l.ok.Load(), l.unavailable.Load()
}

// load is a closed-loop load of GET /checksum/ requests: each client
// sends its next request once it has its answer, numbered in turn, while
// the number is within limit (which may change while the load runs).
type load struct {
	limit, sent, made atomic.Int64 // sent: numbers taken; made: requests sent (within limit)
	ok, unavailable   atomic.Int64
	slowest           atomic.Int64 // nanoseconds
}

// answered returns how many requests had their answer, 200 or 503.
func (l *load) answered() int64 { return l.ok.Load() + l.unavailable.Load() }

// run sends the requests over clients connections, spread over the
// fronts in turn, and returns once every client is done. A transport
// error or a status other than 200 and 503 is reported, and ends that
// client.
func (l *load) run(t *testing.T, fronts []*node, clients int) {
	t.Helper()
	defer func() { t.Logf("%d requests: slowest answer %v", l.made.Load(), time.Duration(l.slowest.Load())) }()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &nethttp.Client{Timeout: 30 * time.Second} // far beyond the 5s response timeout: a hang fails
			defer client.CloseIdleConnections()
			for i := l.sent.Add(1); i <= l.limit.Load(); i = l.sent.Add(1) {
				l.made.Add(1)
				front := fronts[(int(i)+c)%len(fronts)]
				start := time.Now()
				resp, err := client.Get("http://" + front.addr + "/checksum/x" + strconv.FormatInt(i, 10))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				for d := int64(time.Since(start)); ; {
					cur := l.slowest.Load()
					if d <= cur || l.slowest.CompareAndSwap(cur, d) {
						break
					}
				}
				switch resp.StatusCode {
				case 200:
					l.ok.Add(1)
				case 503:
					l.unavailable.Add(1)
				default:
					errs <- fmt.Errorf("front %s: status %d", front.addr, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
}

// loadAcross runs a load of GET /checksum/ requests from clients through
// fronts that cannot end before the fault does, however fast or slow the
// machine: it goes on until on says the load is where the fault should
// strike (on is polled from the test's goroutine), then strike runs and
// the load ends after another `after` requests. It returns the answers
// and how many requests were sent; a transport error fails the test.
func loadAcross(t *testing.T, fronts []*node, clients, after int, on func(l *load) bool, strike func()) (ok, unavailable int64, total int) {
	t.Helper()
	l := &load{}
	l.limit.Store(math.MaxInt64) // until the fault has struck
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(t, fronts, clients)
	}()
	struck := false
	defer func() {
		if !struck { // on or strike failed the test: the load ends with it
			l.limit.Store(0)
			<-done
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); !on(l); time.Sleep(5 * time.Millisecond) {
		select {
		case <-done:
			t.Fatal("the load ended before the fault could strike (a client failed)")
		default:
		}
		if time.Now().After(deadline) { // a hang guard only
			t.Fatalf("the load never reached the point to strike: %d × 200, %d × 503", l.ok.Load(), l.unavailable.Load())
		}
	}
	strike()
	struck = true
	l.limit.Store(l.sent.Load() + int64(after))
	<-done
	return l.ok.Load(), l.unavailable.Load(), int(l.made.Load())
}

// TestClusterTwoFrontsTwoWorkers runs Haboob as four processes: two
// front nodes (the first embeds NATS, the second joins it) and two
// workers hosting Checksum. Requests through both fronts are served by
// both workers, each reply coming back to the front that holds its
// connection; after one worker is SIGKILLed every request still gets 200
// or 503, the other worker keeps serving, and both fronts log at WARN
// that the replica left.
func TestClusterTwoFrontsTwoWorkers(t *testing.T) {
	bin := buildHaboob(t)
	front1 := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "")
	if front1.addr == "" || front1.nats == "" {
		t.Fatalf("front 1: addr %q nats %q", front1.addr, front1.nats)
	}
	front2 := startNode(t, bin, "-config", clusterConfig, "-node", "front", "-nats", front1.nats, "-addr", "127.0.0.1:0", "-profiler", "")
	w1 := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front1.nats, "-profiler", "127.0.0.1:0")
	w2 := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front1.nats, "-profiler", "127.0.0.1:0")
	for _, w := range []*node{w1, w2} {
		if strings.Contains(w.logged(), "bundled site") {
			t.Errorf("a worker built the site:\n%s", w.logged())
		}
	}
	fronts := []*node{front1, front2}
	for _, f := range fronts {
		waitLogged(t, f, `level=WARN msg="remote: replica joined"`)
	}

	// Both workers serve, through both fronts.
	ok, unavailable := loadFronts(t, fronts, 8, 200)
	t.Logf("before the kill: %d × 200, %d × 503; Checksum handled by worker 1: %d, worker 2: %d", ok, unavailable, handledBy(t, w1), handledBy(t, w2))
	if ok+unavailable != 200 || ok == 0 {
		t.Fatalf("before the kill: %d × 200 and %d × 503 for 200 requests", ok, unavailable)
	}
	for _, w := range []*node{w1, w2} {
		waitHandled(t, w, 1)
	}

	// One worker dies: the other serves, the fronts say so.
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ok, unavailable = loadFronts(t, fronts, 8, 200)
	t.Logf("after the kill: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != 200 || ok == 0 {
		t.Fatalf("after the kill: %d × 200 and %d × 503 for 200 requests", ok, unavailable)
	}
	for _, f := range fronts {
		waitLogged(t, f, `out of rotation" node=front replica=worker`)
	}
	before := handledBy(t, w2)
	if ok, _ := loadFronts(t, fronts, 2, 20); ok == 0 {
		t.Fatal("no request served once the dead worker was out of rotation")
	}
	waitHandled(t, w2, before+1) // its /metrics are refreshed every profiler interval
}

// waitHandled waits until worker w's Checksum stage handled at least n
// events (hang guard: 30s).
func waitHandled(t *testing.T, w *node, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for handledBy(t, w) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%v: Checksum handled %d events, want %d", w.cmd.Args, handledBy(t, w), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLogged waits until n has logged a line containing want (hang
// guard: 30s).
func waitLogged(t *testing.T, n *node, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(n.logged(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%v never logged %q:\n%s", n.cmd.Args, want, n.logged())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWorkerWaitingForNATS starts a worker whose NATS server is not up:
// it logs WARN lines while it waits, builds no site, and a SIGTERM
// during the wait ends it cleanly (exit 0) leaving no temporary folder.
func TestWorkerWaitingForNATS(t *testing.T) {
	bin := buildHaboob(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	tmp := t.TempDir()
	cmd := exec.Command(bin, "-config", clusterConfig, "-node", "worker", "-nats", "nats://"+addr)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	var log strings.Builder
	waiting := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), `level=WARN msg="remote: waiting for the NATS server"`) {
				once.Do(func() { close(waiting) })
			}
		}
	}()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("no WARN line while waiting for NATS")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { <-scanned; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still waiting after SIGTERM\n%s", log.String())
	}
	if strings.Contains(log.String(), "bundled site") {
		t.Errorf("a worker built the site:\n%s", log.String())
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

// TestClusterHungWorker SIGSTOPs one of two workers under load: the
// front takes it out of rotation once its heartbeats stop, logs it, and
// answers the requests that worker held (503) instead of leaving them to
// HttpRecv's 5s response timeout; the other worker serves the rest, and
// the stopped one comes back into rotation after SIGCONT.
func TestClusterHungWorker(t *testing.T) {
	bin := buildHaboob(t)
	front := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "")
	w1 := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats)
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats)
	fronts := []*node{front}
	if ok, _ := loadFronts(t, fronts, 4, 40); ok == 0 {
		t.Fatal("nothing served before the stop")
	}
	// The worker stops once 40 requests of the load are answered; the
	// load goes on until the front has taken it out of rotation and 300
	// more requests were sent.
	ok, unavailable, total := loadAcross(t, fronts, 8, 300, func(l *load) bool { return l.answered() >= 40 }, func() {
		if err := w1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitLogged(t, front, `out of rotation" node=front replica=worker`)
	})
	t.Logf("with a worker stopped: %d × 200, %d × 503", ok, unavailable)
	if ok+unavailable != int64(total) || ok == 0 {
		t.Fatalf("%d × 200 and %d × 503 for %d requests", ok, unavailable, total)
	}
	if err := w1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, front, `msg="remote: replica answering again: back in rotation"`)
	if got := front.logged(); strings.Contains(got, "request not answered in time") {
		t.Errorf("a request waited for the response timeout:\n%s", got)
	}
}
