package http_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	nethttp "net/http"
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
)

// TestConcurrentAnswersInOrder: pipelined requests answered from many
// goroutines at once, in a shuffled order, with bodies copied into the
// header and bodies sent by reference past the write window, reach the
// client in request order: the replies go into the socket's one output
// queue as their turn comes, from whichever goroutine makes it come.
func TestConcurrentAnswersInOrder(t *testing.T) {
	const n, workers = 200, 8
	reqs, client := inlineServer(t, http.ServerConfig{
		Socket:      aio.SocketConfig{WriteWindow: 64 << 10},
		MaxPipeline: n,
	}, n)
	_ = client.SetDeadline(time.Now().Add(time.Minute))
	var pipeline bytes.Buffer
	for i := range n {
		fmt.Fprintf(&pipeline, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	go func() { _, _ = client.Write(pipeline.Bytes()) }()
	got := make([]*http.Request, 0, n)
	for range n {
		select {
		case r := <-reqs:
			got = append(got, r)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d requests delivered, want %d", len(got), n)
		}
	}
	body := func(i int) []byte {
		size := 10 + i%7*(40<<10) // small (inline) and up to 240 KiB (by reference)
		return bytes.Repeat([]byte{byte('a' + i%26)}, size)
	}
	order := rand.Perm(n)
	work := make(chan int, n)
	for _, i := range order {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := http.Respond(got[i], http.OK("text/plain", body(i))); err != nil {
					t.Errorf("reply %d: %v", i, err)
				}
			}
		}()
	}
	br := bufio.NewReader(client)
	for i := range n {
		resp, err := nethttp.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(b, body(i)) {
			t.Fatalf("response %d: %d bytes starting %q (%v), want %d bytes of %q", i, len(b), b[:min(len(b), 1)], err, len(body(i)), rune('a'+i%26))
		}
	}
	wg.Wait()
}
