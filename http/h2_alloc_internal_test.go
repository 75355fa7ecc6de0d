package http

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

// TestH2HeadersAllocationFree: encoding a response's HEADERS allocates
// nothing once the connection's buffers have grown (the :status value,
// the date of the current second and the content-length are not made
// into new strings), and the block decodes to the fields expected.
func TestH2HeadersAllocationFree(t *testing.T) {
	srv := &Server{cfg: ServerConfig{}.withDefaults()}
	h := newH2Conn(&Connection{srv: srv})
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		resp *Response
		want map[string]string
	}{
		{"200 with a body", &Response{Header: Header{{Name: "Content-Type", Value: "text/plain"}}, Body: make([]byte, 12345)},
			map[string]string{":status": "200", "content-type": "text/plain", "content-length": "12345"}},
		{"404 empty", &Response{Status: 404},
			map[string]string{":status": "404", "content-length": "0"}},
		{"304 no length", &Response{Status: 304, ContentLength: 99},
			map[string]string{":status": "304"}},
		{"large length", &Response{ContentLength: 1 << 40},
			map[string]string{":status": "200", "content-length": "1099511627776"}},
		{"validators and a dropped length", &Response{Header: Header{
			{Name: "ETag", Value: `"5f2a-1c8"`},
			{Name: "Last-Modified", Value: "Thu, 26 Nov 2026 10:00:00 GMT"},
			{Name: "Content-Length", Value: "7"}, // the body's length is sent instead
			{Name: "Connection", Value: "close"},
			{Name: "Vary", Value: "Accept-Encoding"},
		}, Body: make([]byte, 300)},
			map[string]string{":status": "200", "etag": `"5f2a-1c8"`, "last-modified": "Thu, 26 Nov 2026 10:00:00 GMT",
				"vary": "Accept-Encoding", "content-length": "300"}},
		{"long values, raw and Huffman-coded", &Response{Status: 206, Header: Header{
			{Name: "etag", Value: strings.Repeat("~", 200)}, // longer Huffman-coded: sent raw
			{Name: "Content-Range", Value: "bytes 0-0/" + strings.Repeat("7", 150)},
		}},
			map[string]string{":status": "206", "etag": strings.Repeat("~", 200),
				"content-range": "bytes 0-0/" + strings.Repeat("7", 150), "content-length": "0"}},
	}
	dec := hpack.NewDecoder(4096, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.out = h.out[:0]
			h.writeHeadersLocked(1, tc.resp, false, now)
			fields, err := dec.DecodeFull(h.hb.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, f := range fields {
				if _, dup := got[f.Name]; dup {
					t.Errorf("%s twice", f.Name)
				}
				got[f.Name] = f.Value
			}
			if got["connection"] != "" {
				t.Errorf("connection field sent: %q", got["connection"])
			}
			if got["date"] != "Fri, 27 Nov 2026 06:00:00 GMT" || got["server"] == "" {
				t.Errorf("date %q, server %q", got["date"], got["server"])
			}
			for name, v := range tc.want {
				if got[name] != v {
					t.Errorf("%s: %q, want %q", name, got[name], v)
				}
			}
			if _, ok := tc.want["content-length"]; !ok && got["content-length"] != "" {
				t.Errorf("content-length %q on a %d", got["content-length"], tc.resp.status())
			}
			allocs := testing.AllocsPerRun(100, func() {
				h.out = h.out[:0]
				h.writeHeadersLocked(3, tc.resp, false, now)
			})
			if allocs != 0 {
				t.Errorf("%.1f allocations per HEADERS, want 0", allocs)
			}
		})
	}
	if len(h.out) == 0 { // the last block's HEADERS frame
		t.Fatal("no frames written")
	}
}

// TestH2RequestAllocations: a decoded request holds its header fields
// inline up to the Request's own room, and beyond it in one slice sized
// at once (not a chain of growing ones), with every field kept in order.
func TestH2RequestAllocations(t *testing.T) {
	srv := &Server{cfg: ServerConfig{}.withDefaults()}
	h := newH2Conn(&Connection{srv: srv})
	head := func(regular int) []hpack.HeaderField {
		fs := []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "example.com"}, {Name: ":path", Value: "/index.html"}}
		for i := range regular {
			fs = append(fs, hpack.HeaderField{Name: "x-field-" + strings.Repeat("a", i+1), Value: "v"})
		}
		return fs
	}
	for _, tc := range []struct {
		regular    int
		wantAllocs float64
	}{
		{0, 1}, {2, 1}, {4, 1}, {5, 2}, {12, 2}, {24, 2},
	} {
		fields := head(tc.regular)
		r, _, err := h.newRequest(1, fields)
		if err != nil {
			t.Fatalf("%d fields: %v", tc.regular, err)
		}
		if len(r.Header) != tc.regular {
			t.Fatalf("%d fields: Header holds %d", tc.regular, len(r.Header))
		}
		for i, f := range r.Header {
			if f.Name != fields[4+i].Name {
				t.Fatalf("%d fields: field %d is %q, want %q", tc.regular, i, f.Name, fields[4+i].Name)
			}
		}
		allocs := testing.AllocsPerRun(50, func() { _, _, _ = h.newRequest(1, fields) })
		if allocs > tc.wantAllocs {
			t.Errorf("%d regular fields: %.0f allocations per request, want ≤ %.0f", tc.regular, allocs, tc.wantAllocs)
		}
	}
}
