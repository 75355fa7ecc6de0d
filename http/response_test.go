package http

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	nethttp "net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const fixedDate = "Date: Tue, 05 Mar 2024 07:08:09 GMT\r\n"

func mustParse(t *testing.T, in string) *Request {
	t.Helper()
	reqs, err := newTestParser().Feed(nil, []byte(in))
	if err != nil || len(reqs) != 1 {
		t.Fatalf("parsing %q: %v", in, err)
	}
	return reqs[0]
}

func TestResponseBytes(t *testing.T) {
	get11 := "GET / HTTP/1.1\r\nHost: h\r\n\r\n"
	get10 := "GET / HTTP/1.0\r\n\r\n"
	get10ka := "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
	close11 := "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
	head11 := "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"

	parserErr := func() error {
		_, err := newTestParser().Feed(nil, []byte("GET / HTTP/3.0\r\n\r\n"))
		return err
	}()

	tests := []struct {
		name string
		resp *Response
		req  string // "" for no request
		want string
	}{
		{"OK 1.1 keep-alive", OK("text/plain", []byte("hello")), get11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
		{"OK 1.0 close", OK("text/plain", []byte("hello")), get10,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"},
		{"OK 1.0 keep-alive", OK("text/plain", []byte("hello")), get10ka,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"},
		{"OK 1.1 client close", OK("", nil), close11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
		{"response close", &Response{Status: 204, Close: true}, get11,
			"HTTP/1.1 204 No Content\r\n" + fixedDate + "Server: Sandstorm\r\nConnection: close\r\n\r\n"},
		{"HEAD gets headers only", OK("text/html", []byte("<p>hi</p>")), head11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n"},
		{"not found", NotFound(), get11,
			"HTTP/1.1 404 Not Found\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\n\r\n404 Not Found\n"},
		{"bad request", BadRequest(), get11,
			"HTTP/1.1 400 Bad Request\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 16\r\n\r\n400 Bad Request\n"},
		{"forbidden", Forbidden(), get11,
			"HTTP/1.1 403 Forbidden\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\n\r\n403 Forbidden\n"},
		{"internal error", InternalServerError(), get11,
			"HTTP/1.1 500 Internal Server Error\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n\r\n500 Internal Server Error\n"},
		{"service unavailable", ServiceUnavailable(1500 * time.Millisecond), get11,
			"HTTP/1.1 503 Service Unavailable\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 2\r\nContent-Length: 24\r\n\r\n503 Service Unavailable\n"},
		{"service unavailable, no retry", ServiceUnavailable(0), get11,
			"HTTP/1.1 503 Service Unavailable\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\n\r\n503 Service Unavailable\n"},
		{"redirect", Redirect("/dir/?a=1&b=2", StatusMovedPermanently), get11,
			"HTTP/1.1 301 Moved Permanently\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /dir/?a=1&b=2\r\nContent-Length: 51\r\n\r\n<a href=\"/dir/?a=1&amp;b=2\">Moved Permanently</a>.\n"},
		{"redirect with a bad code", Redirect("/x", 200), get11,
			"HTTP/1.1 302 Found\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /x\r\nContent-Length: 24\r\n\r\n<a href=\"/x\">Found</a>.\n"},
		{"not modified", func() *Response {
			r := NotModified()
			r.Header.Set("ETag", `"abc"`)
			return r
		}(), get11,
			"HTTP/1.1 304 Not Modified\r\n" + fixedDate + "Server: Sandstorm\r\nEtag: \"abc\"\r\n\r\n"},
		{"partial content", PartialContent("text/plain", 2, 4, 10, []byte("cde")), get11,
			"HTTP/1.1 206 Partial Content\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain\r\nContent-Range: bytes 2-4/10\r\nContent-Length: 3\r\n\r\ncde"},
		{"partial content from a file", PartialContent("text/plain", 0, 99, 1000, nil), get11,
			"HTTP/1.1 206 Partial Content\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-99/1000\r\nContent-Length: 100\r\n\r\n"},
		{"file body sent by the caller", NewFileResponse(200, "image/png", 123456), get11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: image/png\r\nContent-Length: 123456\r\n\r\n"},
		{"parser error, no request", ErrorResponse(parserErr), "",
			"HTTP/1.1 505 HTTP Version Not Supported\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 31\r\nConnection: close\r\n\r\n505 HTTP Version Not Supported\n"},
		{"general response, unknown status", NewResponse(599, "", []byte("x")), get11,
			"HTTP/1.1 599 \r\n" + fixedDate + "Server: Sandstorm\r\nContent-Length: 1\r\n\r\nx"},
		{"zero response", &Response{}, get11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nContent-Length: 0\r\n\r\n"},
		{"managed fields and overrides", &Response{Header: Header{
			{"Server", "mine"}, {"Content-Length", "999"}, {"Transfer-Encoding", "chunked"},
			{"Connection", "close"}, {"Date", "yesterday"}, {"X-A", "b"}}, Body: []byte("ab")}, get11,
			"HTTP/1.1 200 OK\r\nServer: mine\r\nDate: yesterday\r\nX-A: b\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab"},
		{"no response splitting", &Response{Header: Header{
			{"X-Evil", "a\r\nSet-Cookie: x=1"}, {"Bad Name\r\n", "v"}, {"", "empty"}}}, get11,
			"HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Sandstorm\r\nX-Evil: a  Set-Cookie: x=1\r\nBad_Name__: v\r\n_: empty\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req *Request
			if tc.req != "" {
				req = mustParse(t, tc.req)
			}
			got := string(tc.resp.Append(nil, req, fixedTime))
			if got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
			var f Formatter
			if got := string(f.Append([]byte("prefix"), tc.resp, req, fixedTime)); got != "prefix"+tc.want {
				t.Fatalf("Formatter.Append: got\n%q", got)
			}
			header := string(tc.resp.AppendHeader(nil, req, fixedTime))
			if n := len(tc.want) - len(header); n < 0 || tc.want[:len(header)] != header {
				t.Fatalf("AppendHeader %q is not the start of Append", header)
			}
		})
	}
}

// TestResponseReadByNetHTTP checks the formatted bytes with an independent
// reader, for both protocol versions and with pipelined responses.
func TestResponseReadByNetHTTP(t *testing.T) {
	resps := []*Response{
		OK("text/plain", []byte("first")),
		NotFound(),
		Redirect("/elsewhere", StatusSeeOther),
		NotModified(),
		ServiceUnavailable(3 * time.Second),
		PartialContent("application/octet-stream", 5, 9, 20, []byte("56789")),
	}
	for _, reqText := range []string{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"} {
		req := mustParse(t, reqText)
		var f Formatter
		var wire []byte
		for _, r := range resps {
			wire = f.Append(wire, r, req, fixedTime)
		}
		br := bufio.NewReader(bytes.NewReader(wire))
		for i, r := range resps {
			got, err := nethttp.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s response %d: %v", req.Proto, i, err)
			}
			body, err := io.ReadAll(got.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got.StatusCode != r.status() || string(body) != string(r.Body) || got.Close {
				t.Fatalf("response %d: status %d body %q close %v", i, got.StatusCode, body, got.Close)
			}
			if d, err := nethttp.ParseTime(got.Header.Get("Date")); err != nil || !d.Equal(fixedTime) {
				t.Fatalf("response %d: Date %q", i, got.Header.Get("Date"))
			}
			for _, h := range r.Header {
				if got.Header.Get(h.Name) != h.Value {
					t.Fatalf("response %d: %s = %q, want %q", i, h.Name, got.Header.Get(h.Name), h.Value)
				}
			}
		}
		if br.Buffered() != 0 {
			t.Fatalf("%d bytes left after the responses", br.Buffered())
		}
	}
}

func TestHTTPDate(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0),
		fixedTime,
		time.Date(1999, time.December, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2038, time.January, 19, 3, 14, 8, 0, time.FixedZone("X", -7*3600)),
		time.Date(2024, time.February, 29, 12, 0, 0, 0, time.Local),
	}
	for d := time.Duration(0); d < 400*24*time.Hour; d += 37*time.Hour + 11*time.Minute + 13*time.Second {
		times = append(times, fixedTime.Add(d))
	}
	for _, tm := range times {
		want := tm.UTC().Format(TimeFormat)
		if got := string(appendHTTPDate(nil, tm)); got != want {
			t.Fatalf("%v: got %q want %q", tm, got, want)
		}
	}
}

func TestFormatterCachesDatePerSecond(t *testing.T) {
	var f Formatter
	f.Server = "Haboob"
	req := mustParse(t, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	first := f.AppendDate(nil, fixedTime)
	c1 := f.date.Load()
	same := f.AppendDate(nil, fixedTime.Add(999*time.Millisecond))
	if string(same) != string(first) || f.date.Load() != c1 {
		t.Fatal("date recomputed within the same second")
	}
	next := f.AppendDate(nil, fixedTime.Add(time.Second))
	if string(next) != "Tue, 05 Mar 2024 07:08:10 GMT" || f.date.Load() == c1 {
		t.Fatalf("date not refreshed: %q", next)
	}
	got := string(f.AppendHeader(nil, OK("", nil), req, fixedTime))
	want := "HTTP/1.1 200 OK\r\n" + fixedDate + "Server: Haboob\r\nContent-Length: 0\r\n\r\n"
	if got != want {
		t.Fatalf("got %q", got)
	}
}

func TestFormatterConcurrent(t *testing.T) {
	var f Formatter
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				now := fixedTime.Add(time.Duration(i*(g+1)) * 300 * time.Millisecond)
				if got, want := string(f.AppendDate(nil, now)), now.UTC().Format(TimeFormat); got != want {
					errs <- fmt.Errorf("got %q want %q", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestResponseKeepAlive(t *testing.T) {
	keep := mustParse(t, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	closing := mustParse(t, "GET / HTTP/1.0\r\n\r\n")
	tests := []struct {
		resp *Response
		req  *Request
		want bool
	}{
		{OK("", nil), keep, true},
		{OK("", nil), closing, false},
		{OK("", nil), nil, false},
		{&Response{Close: true}, keep, false},
		{&Response{Header: Header{{"Connection", "Close"}}}, keep, false},
		{ErrorResponse(fmt.Errorf("x")), keep, false},
	}
	for i, tc := range tests {
		if got := tc.resp.KeepAlive(tc.req); got != tc.want {
			t.Errorf("case %d: KeepAlive = %v", i, got)
		}
	}
}

func TestResponseSendsBody(t *testing.T) {
	get := mustParse(t, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	head := mustParse(t, "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n")
	tests := []struct {
		resp *Response
		req  *Request
		want bool
	}{
		{OK("", []byte("x")), get, true},
		{NewFileResponse(200, "", 10), get, true},
		{OK("", []byte("x")), head, false},
		{NewFileResponse(200, "", 10), head, false},
		{NotModified(), get, false},
		{&Response{Status: StatusNoContent}, get, false},
		{&Response{Status: StatusContinue}, get, false},
		{ErrorResponse(io.EOF), nil, true},
	}
	for i, tc := range tests {
		if got := tc.resp.SendsBody(tc.req); got != tc.want {
			t.Errorf("case %d: SendsBody = %v", i, got)
		}
	}
}

func TestPartialContentPanicsOnBadRange(t *testing.T) {
	for _, tc := range []struct {
		first, last, total int64
		body               []byte
	}{{5, 4, 10, nil}, {0, 10, 10, nil}, {-1, 2, 10, nil}, {0, 2, 10, []byte("ab")}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("PartialContent(%d, %d, %d, %q) did not panic", tc.first, tc.last, tc.total, tc.body)
				}
			}()
			PartialContent("", tc.first, tc.last, tc.total, tc.body)
		}()
	}
}

func TestStatusOf(t *testing.T) {
	if StatusOf(nil) != 200 || StatusOf(io.EOF) != 500 || StatusOf(fmt.Errorf("wrapped: %w", &Error{Status: 414, Err: ErrURITooLong})) != 414 {
		t.Fatal("StatusOf")
	}
	for _, code := range []int{400, 413, 414, 431, 501, 505, 503, 304, 206, 409, 422, 502, 504, 410, 415, 451} {
		if StatusText(code) == "" {
			t.Errorf("no status text for %d", code)
		}
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
		"Sunday, 06-Nov-94 08:49:37 GMT", // RFC 850
		"Sun Nov  6 08:49:37 1994",       // asctime
	} {
		got, err := ParseTime(s)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "yesterday", "06 Nov 1994 08:49:37"} {
		if _, err := ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) accepted", s)
		}
	}
}

// TestAppendFieldNeutralizes: a field is appended whole when its name is
// a token and its value has no control byte, and otherwise with every
// byte that could end the name or the line replaced, wherever it is.
func TestAppendFieldNeutralizes(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{"Content-Type", "text/html; charset=utf-8", "Content-Type: text/html; charset=utf-8\r\n"},
		{"X-Tab", "a\tb", "X-Tab: a\tb\r\n"},
		{"", "v", "_: v\r\n"},
		{"Bad Name:", "v", "Bad_Name_: v\r\n"},
		{"X-Evil", "a\r\nSet-Cookie: x=1", "X-Evil: a  Set-Cookie: x=1\r\n"},
		{"X-End", "ok\n", "X-End: ok \r\n"},
		{"X-Del", "\x7fz\x00", "X-Del:  z \r\n"},
	}
	for _, tt := range tests {
		if got := string(appendField(nil, tt.name, tt.value)); got != tt.want {
			t.Errorf("appendField(%q, %q) = %q, want %q", tt.name, tt.value, got, tt.want)
		}
	}
}

// TestStatusLines: the status line of a known status is built once and
// is the one formatted by hand; an unknown status gets an empty phrase.
func TestStatusLines(t *testing.T) {
	var f Formatter
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		status int
		want   string
	}{
		{200, "HTTP/1.1 200 OK\r\n"},
		{206, "HTTP/1.1 206 Partial Content\r\n"},
		{304, "HTTP/1.1 304 Not Modified\r\n"},
		{503, "HTTP/1.1 503 Service Unavailable\r\n"},
		{299, "HTTP/1.1 299 \r\n"},
		{999, "HTTP/1.1 999 \r\n"},
	} {
		got := string(f.AppendHeader(nil, &Response{Status: tt.status}, nil, now))
		if line, _, _ := strings.Cut(got, "\n"); line+"\n" != tt.want {
			t.Errorf("status %d: %q, want %q", tt.status, line+"\n", tt.want)
		}
	}
}
