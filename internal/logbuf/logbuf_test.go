package logbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/internal/logbuf"
)

// Concurrent writers each land whole (run with -race).
func TestBufferConcurrentWrites(t *testing.T) {
	var b logbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("line\n"))
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
}
