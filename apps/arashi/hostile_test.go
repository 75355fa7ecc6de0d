package arashi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/arashi"
	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/internal/fdtest"
)

// startHostile runs Arashi with its embedded configuration, but a 1 s
// writeTimeout (clients that stop reading) and no admission control.
func startHostile(t *testing.T) *arashi.Service {
	t.Helper()
	yaml := strings.Replace(string(configs.Arashi), "writeTimeout: 60s", "writeTimeout: 1s", 1)
	return startConfig(t, arashi.Config{
		YAML: []byte(yaml), File: configs.ArashiFile, Predicate: "{type: threshold, limit: 100000}",
	})
}

// waitFor polls cond; the deadline is a safety net far above what a
// loaded machine needs, not what decides the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawGet sends GET target on c and returns the status and body.
func rawGet(t *testing.T, c net.Conn, br *bufio.Reader, target string) (int, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
	resp, err := nethttp.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return resp.StatusCode, string(body)
}

// TestSurvivesDescriptorExhaustion: while the process has no descriptor
// left, Arashi's accept fails (counted) and a connection it holds is still
// served, a page from the cache and a page from the database; once
// descriptors are free, the connection that waited is served.
func TestSurvivesDescriptorExhaustion(t *testing.T) {
	svc := startHostile(t)
	addr := svc.App.Addr().String()
	hs, err := svc.App.Haboob().HTTP()
	if err != nil {
		t.Fatal(err)
	}
	key := newClient(t, "http://"+addr).login("user2", mustPassword(2))
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	br := bufio.NewReader(held)
	if code, _ := rawGet(t, held, br, "/"); code != 200 {
		t.Fatalf("login page: %d", code)
	}
	if code, _ := rawGet(t, held, br, "/folders?s="+key); code != 200 {
		t.Fatalf("folders: %d", code)
	}

	ex := fdtest.Exhaust(t, 1) // one descriptor for the waiting client
	waiting, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial with the last descriptor: %v", err)
	}
	defer waiting.Close()
	waitFor(t, "accept errors", func() bool { return hs.Socket().Stats().AcceptErrors >= 2 })
	if code, _ := rawGet(t, held, br, "/"); code != 200 {
		t.Errorf("login page out of descriptors: %d", code)
	}
	// The database may need a descriptor it cannot have: an answer
	// (503 or 500) is fine, a hang or a crash is not.
	if code, _ := rawGet(t, held, br, "/folders?s="+key); code != 200 && code != 503 && code != 500 {
		t.Errorf("folders out of descriptors: %d", code)
	}
	ex.Restore()
	if code, page := rawGet(t, waiting, bufio.NewReader(waiting), "/folders?s="+key); code != 200 || !strings.Contains(page, "Inbox") {
		t.Fatalf("the waiting connection, once descriptors are free: %d", code)
	}
	if code, _ := rawGet(t, held, br, "/folders?s="+key); code != 200 {
		t.Fatalf("folders after recovery: %d", code)
	}
}

// mustPassword is user i's generated password.
func mustPassword(i int) string {
	_, pw := arashi.Credentials(i)
	return pw
}

// TestSurvivesNonReader: a client that pipelines requests and never reads
// stalls only itself: another client is served meanwhile, and
// writeTimeout closes it.
func TestSurvivesNonReader(t *testing.T) {
	svc := startHostile(t)
	addr := svc.App.Addr().String()
	hs, err := svc.App.Haboob().HTTP()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, "http://"+addr)
	key := c.login("user1", mustPassword(1))
	inbox := c.folders(key)[arashi.InboxFolder]
	target := "/list?s=" + url.QueryEscape(key) + "&f=" + inbox[0] // the largest page
	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if tc, ok := bad.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // stops when the server stops reading and closes it
		defer wg.Done()
		req := []byte("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")
		for {
			if _, err := bad.Write(req); err != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	defer bad.Close()
	waitFor(t, "the non-reader to stall", func() bool { return hs.Stats().Requests >= 200 })
	if status, page, _ := c.do("GET", target, nil); status != 200 || !strings.Contains(page, `class="msg"`) {
		t.Errorf("another client while one does not read: %d", status)
	}
	waitFor(t, "writeTimeout to close the non-reader", func() bool { return hs.Stats().WriteTimeouts >= 1 })
	if status, _, _ := c.do("GET", target, nil); status != 200 {
		t.Errorf("after: %d", status)
	}
}
