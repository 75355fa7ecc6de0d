package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/testpki"
)

var (
	joinedRE      = regexp.MustCompile(`msg="remote: joined the cluster" node=\S+ nats=(\S+)`)
	nodeReadyRE   = regexp.MustCompile(`msg="haboob: ready"`)
	profilerRE    = regexp.MustCompile(`msg="haboob: profiler dashboard" url=(\S+)`)
	clusterConfig = "../../configs/haboob-cluster.yaml"
)

// node is one process of a cluster.
type node struct {
	cmd  *exec.Cmd
	addr string // HTTP address, if it serves HTTP
	nats string // NATS URL it joined or embeds
	prof string // its profiler's dashboard URL, if it runs one
	done chan struct{}

	mu  sync.Mutex
	log strings.Builder // its stderr
}

// logged returns what the node wrote to stderr so far.
func (n *node) logged() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// startNode runs the binary and waits until it reports ready.
func startNode(t *testing.T, bin string, args ...string) *node {
	t.Helper()
	n := &node{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
		_ = n.cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			n.mu.Lock()
			n.log.WriteString(line + "\n")
			n.mu.Unlock()
			if m := profilerRE.FindStringSubmatch(line); m != nil {
				n.prof = m[1]
			}
			if m := joinedRE.FindStringSubmatch(line); m != nil {
				n.nats = m[1]
			}
			if m := readyRE.FindStringSubmatch(line); m != nil {
				n.addr = m[1]
			}
			if nodeReadyRE.MatchString(line) {
				once.Do(func() { close(ready) })
			}
			if testing.Verbose() {
				t.Log(line)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not report ready", args)
	}
	return n
}

// TestClusterFrontAndTwoWorkers runs Haboob as three processes on
// loopback (a front node and two workers hosting Checksum), loads
// /checksum/ and SIGKILLs a worker in the middle: every request gets 200
// or 503, none hangs, and the counts add up.
func TestClusterFrontAndTwoWorkers(t *testing.T) {
	bin := buildHaboob(t)
	front := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "")
	if front.addr == "" || front.nats == "" {
		t.Fatalf("front: addr %q nats %q", front.addr, front.nats)
	}
	w1 := startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats)
	w2 := startNode(t, bin, "-node", "worker", "-nats", front.nats) // the embedded cluster graph
	if w1.addr != "" || w2.addr != "" {
		t.Fatalf("a worker serves HTTP on %q %q", w1.addr, w2.addr)
	}
	url := "http://" + front.addr + "/checksum/x"
	client := &nethttp.Client{Timeout: 30 * time.Second} // far beyond the 5s response timeout: a hang fails
	defer client.CloseIdleConnections()
	do := func() (int, error) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Both workers joined before ready; a first request proves the path.
	if code, err := do(); err != nil || code != 200 {
		t.Fatalf("first /checksum/: %d %v", code, err)
	}

	const clients, total = 8, 600
	var sent, ok, unavailable, afterKillOK atomic.Int64
	var killed atomic.Bool
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= total {
				code, err := do()
				switch {
				case err != nil:
					errs <- err
					return
				case code == 200:
					ok.Add(1)
					if killed.Load() {
						afterKillOK.Add(1)
					}
				case code == 503:
					unavailable.Add(1)
				default:
					errs <- fmt.Errorf("status %d", code)
					return
				}
			}
		}()
	}
	for deadline := time.Now().Add(2 * time.Minute); ok.Load()+unavailable.Load() < total/3; { // a hang guard
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests answered before the kill", ok.Load()+unavailable.Load(), total/3)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	t.Logf("%d requests: %d × 200, %d × 503; %d × 200 after the kill", total, ok.Load(), unavailable.Load(), afterKillOK.Load())
	if got := ok.Load() + unavailable.Load(); got != total {
		t.Fatalf("%d answers for %d requests", got, total)
	}
	if afterKillOK.Load() == 0 {
		t.Fatal("no request succeeded on the surviving worker")
	}
}

// TestClusterWithToken runs a front and a worker with -nats-token-file:
// /checksum/ works through the worker; a worker without the token, or
// with another, is refused at start (exit 1, without waiting for NATS),
// and no process logs the token.
func TestClusterWithToken(t *testing.T) {
	bin := buildHaboob(t)
	const secret = "cluster-secret-4711"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	front := startNode(t, bin, "-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", "",
		"-nats-token-file", tokenFile)
	startNode(t, bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats, "-nats-token-file", tokenFile)
	checksumThrough(t, front)
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("not-"+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-node", "worker", "-nats", front.nats},
		{"-node", "worker", "-nats", front.nats, "-nats-token-file", wrong},
	} {
		// A refused worker exits with the refusal; one that waited for
		// NATS instead would end "not reachable within 30s" (the hang
		// guard only stops a worker that never ends).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, bin, append([]string{"-config", clusterConfig}, args...)...).CombinedOutput()
		cancel()
		if err == nil {
			t.Fatalf("%v: a worker without the token ran\n%s", args, out)
		}
		if !strings.Contains(string(out), "refused this node") {
			t.Errorf("%v: no refusal in\n%s", args, out)
		}
		if strings.Contains(string(out), secret) {
			t.Errorf("%v: the token is in the logs\n%s", args, out)
		}
	}
}

// checksumThrough asks front for /checksum/x and fails the test unless a
// worker answered it (200).
func checksumThrough(t *testing.T, front *node) {
	t.Helper()
	resp, err := (&nethttp.Client{Timeout: 30 * time.Second}).Get("http://" + front.addr + "/checksum/x")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/checksum/ through the worker: %d", resp.StatusCode)
	}
}

func TestClusterWithTLSAndToken(t *testing.T) {
	bin := buildHaboob(t)
	dir := t.TempDir()
	ca, cert, key := testpki.Write(t, dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tls-and-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec := []string{"-nats-token-file", tokenFile, "-nats-tls-cert", cert, "-nats-tls-key", key, "-nats-tls-ca", ca}
	front := startNode(t, bin, append([]string{"-config", clusterConfig, "-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0", "-profiler", ""}, sec...)...)
	startNode(t, bin, append([]string{"-config", clusterConfig, "-node", "worker", "-nats", front.nats}, sec...)...)
	checksumThrough(t, front)
	out, err := exec.Command(bin, "-config", clusterConfig, "-node", "worker", "-nats", front.nats, "-nats-token-file", tokenFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refused this node") {
		t.Fatalf("a worker without TLS: %v\n%s", err, out)
	}
}
