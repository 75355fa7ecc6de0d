package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBinaryReloadUnderLoad: four clients, each on one keep-alive
// connection, send requests back to back while haboob reloads its -config
// file six times (Checksum's threshold, batching and rt target, the
// PageCache threshold, changing each time). Every request gets exactly one
// response, 200 with the page (a lost or duplicated response would leave
// a connection's replies out of step), and no connection is closed.
func TestBinaryReloadUnderLoad(t *testing.T) {
	r, w, config := startReloadable(t, "")
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	base := string(data)
	edits := []*strings.Replacer{
		strings.NewReplacer("queue: {threshold: 256}", "queue: {threshold: 300}", "batching: {max: 8}", "batching: {max: 4}"),
		strings.NewReplacer("target: 200ms, enabled: false", "target: 50ms", "queue: {threshold: 16384}\n    threadpool: {max: 2}\n    args:", "queue: {threshold: 8192}\n    threadpool: {max: 2}\n    args:"),
	}
	files := []string{edits[0].Replace(base), edits[1].Replace(base)}
	for i, f := range files {
		if f == base {
			t.Fatalf("configs/haboob.yaml changed: edit %d does not apply", i)
		}
	}

	const clients = 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	served := make([]atomic.Int64, clients)
	errs := make(chan error, clients)
	for i := range clients {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := bufio.NewReader(c)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := getOnce(c, br, "/hello.txt", "hello\n"); err != nil {
					errs <- fmt.Errorf("client %d, request %d: %w", i, served[i].Load()+1, err)
					return
				}
				served[i].Add(1)
			}
		}()
	}
	// Each reload waits until every client has been served since the one
	// before: every reload lands among requests in flight, however the
	// clients are scheduled.
	before := make([]int64, clients)
reloads:
	for n := 1; n <= 6; n++ {
		for i := range served {
			for deadline := time.Now().Add(30 * time.Second); served[i].Load() == before[i]; time.Sleep(time.Millisecond) {
				if len(errs) > 0 { // a client failed: reported below
					break reloads
				}
				if time.Now().After(deadline) { // a hang guard only
					t.Errorf("client %d served nothing before reload %d", i, n)
					break reloads
				}
			}
			before[i] = served[i].Load()
		}
		replaceFile(t, config, files[n%2])
		hangup(t, r)
		w.waitForCount(t, `msg="configuration reloaded"`, n)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := w.count("reload refused"); n != 0 {
		t.Errorf("%d reloads refused", n)
	}
	counts := make([]int64, clients)
	for i := range served {
		counts[i] = served[i].Load()
	}
	t.Logf("requests served per connection across 6 reloads: %v", counts)
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// getOnce sends one GET on a kept-alive connection and checks its one
// response.
func getOnce(c net.Conn, br *bufio.Reader, path, want string) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return err
	}
	resp, err := nethttp.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != 200 || string(body) != want:
		return fmt.Errorf("%d %q", resp.StatusCode, body)
	case resp.Close:
		return fmt.Errorf("the server closes the connection")
	}
	return nil
}

// waitForCount reads log lines until n of them contain want; the timeout
// only guards a hang.
func (w *logWatch) waitForCount(t *testing.T, want string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for w.count(want) < n {
		select {
		case line, ok := <-w.r.logs:
			if !ok {
				t.Fatalf("haboob's log ended with %d lines with %q, want %d:\n%s", w.count(want), want, n, strings.Join(w.seen, "\n"))
			}
			w.seen = append(w.seen, line)
		case <-timeout:
			t.Fatalf("%d log lines with %q in 30 s, want %d:\n%s", w.count(want), want, n, strings.Join(w.seen, "\n"))
		}
	}
}
