package h2test_test

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sandstorm-go/sandstorm/internal/h2test"
)

// serve reads the client's preface and SETTINGS on conn, then answers
// stream 1 with status and the DATA frames of sizes (the last one ends
// the stream), ignoring the client's flow control.
func serve(t *testing.T, conn net.Conn, status string, sizes ...int) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(conn, preface); err != nil {
		t.Error(err)
		return
	}
	fr := http2.NewFramer(conn, conn)
	go func() { // drain what the client sends: settings, window updates
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	var hb bytes.Buffer
	_ = hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: status})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return
	}
	for i, n := range sizes {
		if err := fr.WriteData(1, i == len(sizes)-1, bytes.Repeat([]byte{'x'}, n)); err != nil {
			return
		}
	}
}

// TestBodies: Bodies gives a stream's body, and fails when the server
// sends past the stream's window or answers another status than 200.
func TestBodies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  string
		sizes   []int
		wantErr string
	}{
		{"within the window", "200", []int{600, 600, 600, 100}, ""},
		{"past the window", "200", []int{400, 700}, "past its window of 1000"},
		{"not 200", "404", []int{10}, "status 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			go serve(t, server, tc.status, tc.sizes...)
			t.Cleanup(func() { server.Close() })
			c := h2test.On(t, client, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
			bodies, order, err := c.Bodies(1000, 1)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			total := 0
			for _, n := range tc.sizes {
				total += n
			}
			if err != nil || len(bodies[1]) != total || len(order) != len(tc.sizes) {
				t.Fatalf("%d bytes in %d frames (%v), want %d in %d", len(bodies[1]), len(order), err, total, len(tc.sizes))
			}
		})
	}
}
