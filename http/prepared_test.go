package http

import (
	"strings"
	"testing"
	"time"
)

// A response with a PreparedHeader is formatted byte for byte as the same
// response without it, and keeps or closes the connection alike, for
// every kind of field: ordinary ones, Date and Server given by the
// handler, framing fields the formatter drops, "Connection: close", and
// bytes that must be neutralized.
func TestPreparedHeaderSameBytes(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)
	get := &Request{Method: "GET", Minor: 1}
	tests := []struct {
		name   string
		header Header
	}{
		{"none", nil},
		{"page", Header{
			{"Content-Type", "text/html; charset=utf-8"},
			{"Last-Modified", "Fri, 27 Nov 2026 08:00:00 GMT"},
			{"ETag", `"5f-3e8"`},
			{"Accept-Ranges", "bytes"},
		}},
		{"own Date and Server", Header{{"Date", "Mon, 01 Jan 2001 00:00:00 GMT"}, {"Server", "mine"}}},
		{"framing fields dropped", Header{{"Content-Length", "7"}, {"Transfer-Encoding", "chunked"}, {"X-A", "a"}}},
		{"Connection: close", Header{{"Connection", "keep-alive, close"}}},
		{"neutralized", Header{{"X-Evil", "a\r\nSet-Cookie: x=1"}, {"Bad Name:", "v"}, {"", "empty name"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f Formatter
			plain := &Response{Header: tc.header, ContentLength: 10}
			prepared := &Response{Header: tc.header, Prepared: PrepareHeader(tc.header), ContentLength: 10}
			want := string(f.AppendHeader(nil, plain, get, now))
			if got := string(f.AppendHeader(nil, prepared, get, now)); got != want {
				t.Fatalf("prepared:\n%q\nwant\n%q", got, want)
			}
			if prepared.KeepAlive(get) != plain.KeepAlive(get) {
				t.Fatalf("KeepAlive %v, want %v", prepared.KeepAlive(get), plain.KeepAlive(get))
			}
		})
	}
}

// The prepared bytes are what is sent (the fields are not formatted
// again), but only while the Response's Header is the one they were made
// from: a Header replaced or grown is formatted itself.
func TestPreparedHeaderUsedOnlyForItsHeader(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)
	get := &Request{Method: "GET", Minor: 1}
	h := Header{{"Content-Type", "text/plain"}, {"ETag", `"a"`}}
	p := PrepareHeader(h)
	if len(p.Header()) != 2 || &p.Header()[0] != &h[0] {
		t.Fatal("Header() is not the header prepared")
	}
	// Prepared bytes are copied: an in-place change of the (shared,
	// read-only) Header after PrepareHeader does not show.
	h[1].Value = `"b"`
	var f Formatter
	out := string(f.AppendHeader(nil, &Response{Header: h, Prepared: p}, get, now))
	if !strings.Contains(out, "ETag: \"a\"\r\n") {
		t.Fatalf("prepared fields not used: %q", out)
	}
	for _, other := range []Header{
		{{"Content-Type", "text/plain"}, {"ETag", `"c"`}}, // another slice
		append(h[:2:2], Field{"X-More", "1"}),             // grown
		h[:1],                                             // shrunk
	} {
		out := string(f.AppendHeader(nil, &Response{Header: other, Prepared: p}, get, now))
		want := string(f.AppendHeader(nil, &Response{Header: other}, get, now))
		if out != want {
			t.Fatalf("Prepared of another Header used:\n%q\nwant\n%q", out, want)
		}
	}
}
