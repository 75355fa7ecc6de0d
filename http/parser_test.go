package http

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

var fixedTime = time.Date(2024, time.March, 5, 7, 8, 9, 0, time.UTC)

func newTestParser() *Parser {
	return &Parser{Now: func() time.Time { return fixedTime }}
}

// feedPieces feeds the pieces in order to a fresh parser, stopping at the
// first error.
func feedPieces(p *Parser, pieces [][]byte) ([]*Request, error) {
	var reqs []*Request
	for _, piece := range pieces {
		var err error
		reqs, err = p.Feed(reqs, piece)
		if err != nil {
			return reqs, err
		}
	}
	return reqs, nil
}

// splits returns ways of cutting in into pieces: whole, byte by byte, and
// in two at every position.
func splits(in string) map[string][][]byte {
	out := map[string][][]byte{"whole": {[]byte(in)}}
	var bytewise [][]byte
	for i := 0; i < len(in); i++ {
		bytewise = append(bytewise, []byte{in[i]})
	}
	out["bytewise"] = bytewise
	for i := 1; i < len(in); i++ {
		out[fmt.Sprintf("split@%d", i)] = [][]byte{[]byte(in[:i]), []byte(in[i:])}
	}
	return out
}

// summary is the comparable part of a Request.
type summary struct {
	Method, Target, Path, RawQuery, Proto string
	Minor                                 int
	Host                                  string
	Header, Trailer                       Header
	Body                                  string
	Chunked, Close, ExpectContinue        bool
	Class                                 int
	Seq                                   uint64
}

func summarize(r *Request) summary {
	return summary{
		Method: r.Method, Target: r.Target, Path: r.Path, RawQuery: r.RawQuery, Proto: r.Proto,
		Minor: r.Minor, Host: r.Host, Header: r.Header, Trailer: r.Trailer, Body: string(r.Body),
		Chunked: r.Chunked, Close: r.Close, ExpectContinue: r.ExpectContinue, Class: r.Class(), Seq: r.Seq,
	}
}

var validRequests = []struct {
	name string
	in   string
	want summary
}{
	{
		name: "simple GET",
		in:   "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n",
		want: summary{Method: "GET", Target: "/index.html", Path: "/index.html", Proto: "HTTP/1.1", Minor: 1,
			Host: "example.com", Header: Header{{"Host", "example.com"}}},
	},
	{
		name: "query, escapes and dot segments",
		in:   "GET /a/./b/../c%20d/%2e%2e/e/?x=1&y=%41 HTTP/1.1\r\nHost: h\r\n\r\n",
		want: summary{Method: "GET", Target: "/a/./b/../c%20d/%2e%2e/e/?x=1&y=%41", Path: "/a/e/", RawQuery: "x=1&y=%41",
			Proto: "HTTP/1.1", Minor: 1, Host: "h", Header: Header{{"Host", "h"}}},
	},
	{
		name: "traversal above root",
		in:   "GET /../../etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n",
		want: summary{Method: "GET", Target: "/../../etc/passwd", Path: "/etc/passwd", Proto: "HTTP/1.1", Minor: 1,
			Host: "h", Header: Header{{"Host", "h"}}},
	},
	{
		name: "canonical names, repeated fields, whitespace",
		in: "GET / HTTP/1.1\r\nhost:h\r\naccept-encoding:  gzip \t\r\nX-MULTI: a\r\nx-multi: b\r\n" +
			"Empty:\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}, {"Accept-Encoding", "gzip"}, {"X-Multi", "a"}, {"X-Multi", "b"}, {"Empty", ""}}},
	},
	{
		name: "bare LF line ends and leading empty lines",
		in:   "\r\n\nGET / HTTP/1.1\nHost: h\n\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}}},
	},
	{
		name: "Content-Length body",
		in:   "POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world",
		want: summary{Method: "POST", Target: "/form", Path: "/form", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}, {"Content-Length", "11"}}, Body: "hello world"},
	},
	{
		name: "identical repeated Content-Length",
		in:   "PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		want: summary{Method: "PUT", Target: "/x", Path: "/x", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}, {"Content-Length", "3"}, {"Content-Length", "3"}}, Body: "abc"},
	},
	{
		name: "chunked with extensions and trailers",
		in: "POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
			"5;name=value;quoted=\"a;b\"\r\nhello\r\n0006 ; ext\r\n world\r\n0\r\nX-Sum: 42\r\nx-other: y\r\n\r\n",
		want: summary{Method: "POST", Target: "/up", Path: "/up", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header:  Header{{"Host", "h"}, {"Transfer-Encoding", "chunked"}, {"Trailer", "X-Sum"}},
			Trailer: Header{{"X-Sum", "42"}, {"X-Other", "y"}}, Body: "hello world", Chunked: true},
	},
	{
		name: "chunked, no trailer, upper-case hex",
		in:   "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
		want: summary{Method: "POST", Target: "/", Path: "/", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}, {"Transfer-Encoding", "Chunked"}}, Body: "0123456789", Chunked: true},
	},
	{
		name: "HTTP/1.0 closes by default",
		in:   "GET / HTTP/1.0\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.0", Minor: 0, Close: true},
	},
	{
		name: "HTTP/1.0 keep-alive",
		in:   "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.0", Minor: 0,
			Header: Header{{"Connection", "Keep-Alive"}}},
	},
	{
		name: "HTTP/1.1 close",
		in:   "GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade, close\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.1", Minor: 1, Host: "h", Close: true,
			Header: Header{{"Host", "h"}, {"Connection", "upgrade, close"}}},
	},
	{
		name: "higher minor version is 1.1",
		in:   "GET / HTTP/1.7\r\nHost: h\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.7", Minor: 7, Host: "h",
			Header: Header{{"Host", "h"}}},
	},
	{
		name: "expect 100-continue",
		in:   "PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nok",
		want: summary{Method: "PUT", Target: "/f", Path: "/f", Proto: "HTTP/1.1", Minor: 1, Host: "h", ExpectContinue: true,
			Header: Header{{"Host", "h"}, {"Expect", "100-Continue"}, {"Content-Length", "2"}}, Body: "ok"},
	},
	{
		name: "expect ignored in HTTP/1.0",
		in:   "PUT /f HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
		want: summary{Method: "PUT", Target: "/f", Path: "/f", Proto: "HTTP/1.0", Minor: 0, Close: true,
			Header: Header{{"Expect", "100-continue"}, {"Content-Length", "0"}}},
	},
	{
		name: "class header",
		in:   "GET / HTTP/1.1\r\nHost: h\r\nx-class: 2\r\n\r\n",
		want: summary{Method: "GET", Target: "/", Path: "/", Proto: "HTTP/1.1", Minor: 1, Host: "h", Class: 2,
			Header: Header{{"Host", "h"}, {"X-Class", "2"}}},
	},
	{
		name: "absolute form takes Host from the target",
		in:   "GET http://User@Example.org:8080/p/../q?z HTTP/1.1\r\nHost: ignored\r\n\r\n",
		want: summary{Method: "GET", Target: "http://User@Example.org:8080/p/../q?z", Path: "/q", RawQuery: "z",
			Proto: "HTTP/1.1", Minor: 1, Host: "Example.org:8080", Header: Header{{"Host", "ignored"}}},
	},
	{
		name: "asterisk form",
		in:   "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		want: summary{Method: "OPTIONS", Target: "*", Path: "*", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}}},
	},
	{
		name: "authority form",
		in:   "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
		want: summary{Method: "CONNECT", Target: "example.com:443", Path: "", Proto: "HTTP/1.1", Minor: 1,
			Host: "example.com:443"},
	},
	{
		name: "extension method and obs-text value",
		in:   "PURGE /x HTTP/1.1\r\nHost: h\r\nX-Name: caf\xc3\xa9\r\n\r\n",
		want: summary{Method: "PURGE", Target: "/x", Path: "/x", Proto: "HTTP/1.1", Minor: 1, Host: "h",
			Header: Header{{"Host", "h"}, {"X-Name", "caf\xc3\xa9"}}},
	},
}

func TestParserValidAtEverySplit(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			for how, pieces := range splits(tc.in) {
				p := newTestParser()
				reqs, err := feedPieces(p, pieces)
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if len(reqs) != 1 {
					t.Fatalf("%s: got %d requests, want 1", how, len(reqs))
				}
				if got := summarize(reqs[0]); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("%s:\n got %+v\nwant %+v", how, got, tc.want)
				}
				if !reqs[0].Received.Equal(fixedTime) {
					t.Errorf("%s: Received = %v", how, reqs[0].Received)
				}
				if p.Buffered() != 0 || p.Idle() == tc.want.Close || p.Closed() != tc.want.Close {
					t.Errorf("%s: after a complete request Idle=%v Closed=%v Buffered=%d", how, p.Idle(), p.Closed(), p.Buffered())
				}
			}
		})
	}
}

func TestParserPipelined(t *testing.T) {
	var all strings.Builder
	var want []summary
	for i, tc := range validRequests {
		if tc.want.Close {
			continue // a server stops reading after these
		}
		all.WriteString(tc.in)
		w := tc.want
		w.Seq = uint64(len(want))
		want = append(want, w)
		_ = i
	}
	in := all.String()
	for _, size := range []int{1, 2, 3, 7, 64, 1500, len(in)} {
		p := newTestParser()
		p.Conn = "conn-7"
		var reqs []*Request
		for off := 0; off < len(in); off += size {
			var err error
			reqs, err = p.Feed(reqs, []byte(in[off:min(off+size, len(in))]))
			if err != nil {
				t.Fatalf("packets of %d: %v", size, err)
			}
		}
		if len(reqs) != len(want) {
			t.Fatalf("packets of %d: got %d requests, want %d", size, len(reqs), len(want))
		}
		for i, r := range reqs {
			if got := summarize(r); !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("packets of %d, request %d:\n got %+v\nwant %+v", size, i, got, want[i])
			}
			if r.Conn != "conn-7" {
				t.Errorf("request %d: Conn = %v", i, r.Conn)
			}
		}
	}
}

func TestParserSeveralPerFeed(t *testing.T) {
	one := "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
	p := newTestParser()
	reqs, err := p.Feed(nil, []byte(strings.Repeat(one, 5)+"GET /b HTT"))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 5 {
		t.Fatalf("got %d requests, want 5", len(reqs))
	}
	if p.Idle() || p.Buffered() != len("GET /b HTT") {
		t.Fatalf("Idle=%v Buffered=%d with a partial request", p.Idle(), p.Buffered())
	}
	reqs, err = p.Feed(reqs[:0], []byte("P/1.1\r\nHost: h\r\n\r\n"))
	if err != nil || len(reqs) != 1 || reqs[0].Path != "/b" || reqs[0].Seq != 5 {
		t.Fatalf("got %v, %v", reqs, err)
	}
}

var badRequests = []struct {
	name   string
	in     string
	limits Limits
	status int
	err    error
}{
	{"no spaces", "GET\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"HTTP/0.9 style", "GET /\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"double space", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"empty authority", "CONNECT  HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrTarget},
	{"bad method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"control byte before request line", "\x00GET / HTTP/1.1\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"lower-case version", "GET / http/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"long version", "GET / HTTP/1.10\r\nHost: h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"trailing space", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", Limits{}, 505, ErrVersion},
	{"HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", Limits{}, 505, ErrVersion},
	{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Limits{}, 505, ErrVersion},
	{"control byte in target", "GET /a\x01b HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrTarget},
	{"bad escape", "GET /a%zzb HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrTarget},
	{"relative target", "GET a/b HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrTarget},
	{"bad absolute target", "GET http://[::1/ HTTP/1.1\r\nHost: h\r\n\r\n", Limits{}, 400, ErrTarget},
	{"no colon", "GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"empty name", "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"control byte in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"bare CR in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", Limits{}, 400, ErrObsFold},
	{"whitespace before first field", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", Limits{}, 400, ErrObsFold},
	{"missing Host", "GET / HTTP/1.1\r\n\r\n", Limits{}, 400, ErrHost},
	{"two Host", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", Limits{}, 400, ErrHost},
	{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", Limits{}, 400, ErrHost},
	{"bad Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n", Limits{}, 400, ErrContentLength},
	{"signed Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nx", Limits{}, 400, ErrContentLength},
	{"empty Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", Limits{}, 400, ErrContentLength},
	{"list Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\nx", Limits{}, 400, ErrContentLength},
	{"huge Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", Limits{}, 400, ErrContentLength},
	{"conflicting Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", Limits{}, 400, ErrContentLength},
	{"CL and TE", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Limits{}, 400, ErrFraming},
	{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Limits{}, 400, ErrFraming},
	{"chunked twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", Limits{}, 400, ErrFraming},
	{"empty TE", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\n\r\n", Limits{}, 400, ErrFraming},
	{"gzip TE", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", Limits{}, 501, ErrUnsupportedTE},
	{"identity TE", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", Limits{}, 501, ErrUnsupportedTE},
	{"bad chunk size", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", Limits{}, 400, ErrChunk},
	{"empty chunk size", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", Limits{}, 400, ErrChunk},
	{"chunk size junk", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n", Limits{}, 400, ErrChunk},
	{"chunk size overflow", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", Limits{}, 400, ErrChunk},
	{"chunk line bare LF", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", Limits{}, 400, ErrChunk},
	{"CR in chunk line", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;a\rb\r\nhello\r\n0\r\n\r\n", Limits{}, 400, ErrChunk},
	{"chunk data too long", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", Limits{}, 400, ErrChunk},
	{"chunk data without CRLF", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n", Limits{}, 400, ErrChunk},
	{"obs-fold in trailer", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: b\r\n c\r\n\r\n", Limits{}, 400, ErrObsFold},
	{"bad class", "GET / HTTP/1.1\r\nHost: h\r\nX-Class: high\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"conflicting class", "GET / HTTP/1.1\r\nHost: h\r\nX-Class: 1\r\nX-Class: 2\r\n\r\n", Limits{}, 400, ErrMalformed},
	{"too many empty lines", strings.Repeat("\r\n", 20) + "GET / HTTP/1.1\r\nHost: h\r\n\r\n", Limits{MaxLine: 32}, 400, ErrMalformed},

	{"URI too long", "GET /" + strings.Repeat("a", 40) + " HTTP/1.1\r\nHost: h\r\n\r\n", Limits{MaxLine: 32}, 414, ErrURITooLong},
	{"URI too long, no line end yet", "GET /" + strings.Repeat("a", 40), Limits{MaxLine: 32}, 414, ErrURITooLong},
	{"method too long", strings.Repeat("G", 40) + " / HTTP/1.1\r\n\r\n", Limits{MaxLine: 32}, 400, ErrMalformed},
	{"line at the limit", "GET /" + strings.Repeat("a", 18) + " HTTP/1.1\r\n\r\n", Limits{MaxLine: 32}, 400, ErrHost},
	{"header bytes", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 100) + "\r\n\r\n", Limits{MaxHeaderBytes: 64}, 431, ErrHeaderTooLarge},
	{"header bytes, no line end yet", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("v", 100), Limits{MaxHeaderBytes: 64}, 431, ErrHeaderTooLarge},
	{"header count", "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", Limits{MaxHeaders: 3}, 431, ErrHeaderTooLarge},
	{"trailer bytes", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + strings.Repeat("v", 100) + "\r\n\r\n", Limits{MaxHeaderBytes: 64}, 431, ErrHeaderTooLarge},
	{"trailer count", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", Limits{MaxHeaders: 2}, 431, ErrHeaderTooLarge},
	{"Content-Length over limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", Limits{MaxBody: 10}, 413, ErrBodyTooLarge},
	{"chunks over limit", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n6\r\nworld!\r\n0\r\n\r\n", Limits{MaxBody: 10}, 413, ErrBodyTooLarge},
	{"chunk line too long", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 64) + "\r\nx\r\n0\r\n\r\n", Limits{MaxLine: 32}, 400, ErrChunk},
	{"chunk extensions add up", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1;"+strings.Repeat("e", 20)+"\r\nx\r\n", 5) + "0\r\n\r\n", Limits{MaxHeaderBytes: 64}, 400, ErrChunk},
}

func TestParserErrorsAtEverySplit(t *testing.T) {
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			for how, pieces := range splits(tc.in) {
				p := newTestParser()
				p.Limits = tc.limits
				reqs, err := feedPieces(p, pieces)
				if len(reqs) != 0 {
					t.Fatalf("%s: got %d requests before the error", how, len(reqs))
				}
				if err == nil {
					t.Fatalf("%s: no error", how)
				}
				var perr *Error
				if !errors.As(err, &perr) {
					t.Fatalf("%s: error %v is not an *Error", how, err)
				}
				if perr.Status != tc.status || !errors.Is(err, tc.err) || StatusOf(err) != tc.status {
					t.Fatalf("%s: got %d %v, want %d %v", how, perr.Status, err, tc.status, tc.err)
				}
				// The parser stays failed.
				more, err2 := p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\n\r\n"))
				if len(more) != 0 || err2 != err || p.Err() != err {
					t.Fatalf("%s: after the error Feed gave %d requests, %v", how, len(more), err2)
				}
			}
		})
	}
}

func TestParserGoodRequestsBeforeError(t *testing.T) {
	in := "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nBAD\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n"
	for how, pieces := range splits(in) {
		p := newTestParser()
		reqs, err := feedPieces(p, pieces)
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: err = %v", how, err)
		}
		if len(reqs) != 2 || reqs[0].Path != "/1" || reqs[1].Path != "/2" {
			t.Fatalf("%s: got %d requests", how, len(reqs))
		}
	}
}

func TestParserKeepAlive(t *testing.T) {
	tests := []struct {
		proto, connection string
		close             bool
	}{
		{"HTTP/1.1", "", false},
		{"HTTP/1.1", "keep-alive", false},
		{"HTTP/1.1", "close", true},
		{"HTTP/1.1", "Close", true},
		{"HTTP/1.1", "keep-alive, close", true},
		{"HTTP/1.1", "closed", false},
		{"HTTP/1.0", "", true},
		{"HTTP/1.0", "keep-alive", false},
		{"HTTP/1.0", "KEEP-ALIVE", false},
		{"HTTP/1.0", "foo ,keep-alive", false},
		{"HTTP/1.0", "keep-alive, close", true},
		{"HTTP/1.0", "close", true},
	}
	for _, tc := range tests {
		in := "GET / " + tc.proto + "\r\nHost: h\r\n"
		if tc.connection != "" {
			in += "Connection: " + tc.connection + "\r\n"
		}
		in += "\r\n"
		reqs, err := newTestParser().Feed(nil, []byte(in))
		if err != nil || len(reqs) != 1 {
			t.Fatalf("%s %q: %v", tc.proto, tc.connection, err)
		}
		if reqs[0].Close != tc.close || reqs[0].KeepAlive() == tc.close {
			t.Errorf("%s Connection %q: Close = %v, want %v", tc.proto, tc.connection, reqs[0].Close, tc.close)
		}
	}
}

func TestParserDoesNotAliasInput(t *testing.T) {
	in := []byte("POST /path?q=1 HTTP/1.1\r\nHost: host\r\nx-lower: value\r\nContent-Length: 4\r\n\r\nbody")
	for _, size := range []int{1, 5, len(in)} {
		buf := append([]byte(nil), in...)
		p := newTestParser()
		var reqs []*Request
		for off := 0; off < len(buf); off += size {
			var err error
			if reqs, err = p.Feed(reqs, buf[off:min(off+size, len(buf))]); err != nil {
				t.Fatal(err)
			}
		}
		for i := range buf {
			buf[i] = 'X' // the connection reuses its read buffer
		}
		r := reqs[0]
		if r.Method != "POST" || r.Target != "/path?q=1" || r.Host != "host" ||
			r.Header.Get("X-Lower") != "value" || string(r.Body) != "body" {
			t.Fatalf("packets of %d: request changed with its input: %+v", size, summarize(r))
		}
	}
}

func TestParserLargeBodyAcrossPackets(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 000 bytes
	head := fmt.Sprintf("PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", len(body))
	in := append([]byte(head), body...)
	p := newTestParser()
	var reqs []*Request
	for off := 0; off < len(in); off += 16 << 10 {
		var err error
		if reqs, err = p.Feed(reqs, in[off:min(off+16<<10, len(in))]); err != nil {
			t.Fatal(err)
		}
		if len(reqs) == 0 && p.Buffered() > len(head) {
			t.Fatalf("parser buffers %d bytes of body", p.Buffered())
		}
	}
	if len(reqs) != 1 || !bytes.Equal(reqs[0].Body, body) {
		t.Fatalf("got %d requests", len(reqs))
	}
}

func TestParserChunkedBodyAcrossPackets(t *testing.T) {
	var in strings.Builder
	var want strings.Builder
	in.WriteString("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
	for i := 1; i < 300; i += 7 {
		data := strings.Repeat(string(rune('a'+i%26)), i)
		fmt.Fprintf(&in, "%x\r\n%s\r\n", i, data)
		want.WriteString(data)
	}
	in.WriteString("0\r\n\r\n")
	for _, size := range []int{1, 3, 100, in.Len()} {
		p := newTestParser()
		s := in.String()
		var reqs []*Request
		for off := 0; off < len(s); off += size {
			var err error
			if reqs, err = p.Feed(reqs, []byte(s[off:min(off+size, len(s))])); err != nil {
				t.Fatal(err)
			}
		}
		if len(reqs) != 1 || string(reqs[0].Body) != want.String() {
			t.Fatalf("packets of %d: wrong body", size)
		}
	}
}

func TestParserTakeContinue(t *testing.T) {
	head := "PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"

	p := newTestParser()
	reqs, err := p.Feed(nil, []byte(head))
	if err != nil || len(reqs) != 0 {
		t.Fatalf("head: %v, %d requests", err, len(reqs))
	}
	if !p.TakeContinue() {
		t.Fatal("TakeContinue = false with the body outstanding")
	}
	if p.TakeContinue() {
		t.Fatal("TakeContinue = true twice for one request")
	}
	if got := string(AppendContinue(nil)); got != "HTTP/1.1 100 Continue\r\n\r\n" {
		t.Fatalf("AppendContinue = %q", got)
	}
	reqs, err = p.Feed(nil, []byte("hello"))
	if err != nil || len(reqs) != 1 || string(reqs[0].Body) != "hello" || !reqs[0].ExpectContinue {
		t.Fatalf("body: %v, %d requests", err, len(reqs))
	}
	if p.TakeContinue() {
		t.Fatal("TakeContinue = true between requests")
	}

	// The client did not wait: part of the body came with the head.
	p = newTestParser()
	if _, err := p.Feed(nil, []byte(head+"he")); err != nil {
		t.Fatal(err)
	}
	if p.TakeContinue() {
		t.Fatal("TakeContinue = true after body bytes arrived")
	}

	// No body at all: nothing to wait for, the request is complete.
	p = newTestParser()
	reqs, _ = p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n"))
	if len(reqs) != 1 || p.TakeContinue() {
		t.Fatalf("bodiless: %d requests, TakeContinue true", len(reqs))
	}
}

func TestParserClassHeaderConfigurable(t *testing.T) {
	p := newTestParser()
	p.ClassHeader = "X-Priority"
	reqs, err := p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\nX-Class: 9\r\nx-priority: 3\r\n\r\n"))
	if err != nil || len(reqs) != 1 || reqs[0].Class() != 3 {
		t.Fatalf("%v, %+v", err, reqs)
	}
}

func TestParserReset(t *testing.T) {
	p := newTestParser()
	p.Conn = 42
	if _, err := p.Feed(nil, []byte("GET / HTTP/9.9\r\n")); err == nil {
		t.Fatal("no error")
	}
	p.Reset()
	if p.Err() != nil || !p.Idle() || p.Conn != 42 || p.Now == nil {
		t.Fatal("Reset did not restore a fresh parser with its settings")
	}
	reqs, err := p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\n\r\n"))
	if err != nil || len(reqs) != 1 || reqs[0].Seq != 0 || reqs[0].Conn != 42 {
		t.Fatalf("after Reset: %v, %+v", err, reqs)
	}
}

func TestParserManyHeadersSpillInline(t *testing.T) {
	var in strings.Builder
	in.WriteString("GET / HTTP/1.1\r\nHost: h\r\n")
	for i := range 40 {
		fmt.Fprintf(&in, "X-H%d: %d\r\n", i, i)
	}
	in.WriteString("\r\n")
	reqs, err := newTestParser().Feed(nil, []byte(in.String()))
	if err != nil || len(reqs) != 1 {
		t.Fatal(err)
	}
	h := reqs[0].Header
	if len(h) != 41 || h.Get("x-h39") != "39" || h.Get("X-H0") != "0" {
		t.Fatalf("got %d fields", len(h))
	}
}

func TestParserStopsAfterClose(t *testing.T) {
	for _, first := range []string{
		"GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
		"GET /1 HTTP/1.0\r\n\r\n",
	} {
		in := first + "GET /2 HTTP/1.1\r\nHost: h\r\n\r\nGARBAGE\r\n\r\n"
		for how, pieces := range splits(in) {
			p := newTestParser()
			reqs, err := feedPieces(p, pieces)
			if err != nil || len(reqs) != 1 || reqs[0].Path != "/1" || !reqs[0].Close || !p.Closed() {
				t.Fatalf("%s: %v, %d requests, Closed=%v", how, err, len(reqs), p.Closed())
			}
		}
	}
	p := newTestParser()
	if _, err := p.Feed(nil, []byte("GET / HTTP/1.1\r\nHost: h\r\n\r\n")); err != nil || p.Closed() {
		t.Fatal("Closed after a keep-alive request")
	}
}

// TestParserHeadSizes parses heads on both sides of the sizes and field
// counts that share one allocation with their Request (newRequest) and
// checks every string of the request against its input, after the input
// is overwritten, and that adding fields to the Header overwrites none.
func TestParserHeadSizes(t *testing.T) {
	sizes := []int{100, 104, 105, 360, 361, 616, 617, 1128, 1129, 3 * 1128}
	for _, fields := range []int{1, 4, 5, 8, 9, 16, 17, 24} {
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%d fields, %d bytes", fields, size), func(t *testing.T) {
				var b strings.Builder
				b.WriteString("GET /p HTTP/1.1\r\nHost: h\r\n")
				for i := 1; i < fields-1; i++ { // Host, these, X-Pad
					fmt.Fprintf(&b, "X-F%d: %d\r\n", i, i)
				}
				pad := size - b.Len() - len("\r\n")
				if fields == 1 {
					pad = 0 // no field to pad
				} else {
					pad -= len("X-Pad: \r\n")
				}
				if pad < 0 {
					t.Skip("too many fields for the size")
				}
				padding := strings.Repeat("v", pad)
				if fields > 1 {
					b.WriteString("X-Pad: " + padding + "\r\n")
				}
				b.WriteString("\r\n")
				in := []byte(b.String())
				if fields > 1 && len(in) != size {
					t.Fatalf("head of %d bytes, want %d", len(in), size)
				}
				reqs, err := newTestParser().Feed(nil, in)
				if err != nil {
					t.Fatal(err)
				}
				want := string(in)
				for i := range in {
					in[i] = 'X'
				}
				r := reqs[0]
				r.Header.Add("X-Added", "a") // must not overwrite a field
				if r.Method != "GET" || r.Target != "/p" || r.Proto != "HTTP/1.1" || r.Host != "h" {
					t.Fatalf("head of %d bytes: got %+v", size, summarize(r))
				}
				if fields > 1 && r.Header.Get("X-Pad") != padding {
					t.Fatalf("X-Pad: %d bytes, want %d", len(r.Header.Get("X-Pad")), pad)
				}
				for i := 1; i < fields-1; i++ {
					if got := r.Header.Get(fmt.Sprintf("X-F%d", i)); got != strconv.Itoa(i) {
						t.Fatalf("X-F%d: %q in %q", i, got, want)
					}
				}
				if got := len(r.Header); got != fields+1 {
					t.Fatalf("%d fields, want %d", got, fields+1)
				}
			})
		}
	}
}

// TestRequestObjectsFillSizeClasses: each object newRequest allocates
// fills its size class, so a field added to Request, or a wrong head
// size, which would waste a class's worth of bytes per request, fails here.
func TestRequestObjectsFillSizeClasses(t *testing.T) {
	tests := []struct {
		name       string
		size, want uintptr
	}{
		{"Request, 4 fields, 104-byte head", unsafe.Sizeof(requestHead512{}), 512},
		{"Request, 4 fields, 616-byte head", unsafe.Sizeof(requestHead1K{}), 1024},
		{"Request, 8 fields, 360-byte head", unsafe.Sizeof(requestFields8Head1K{}), 1024},
		{"Request, 16 fields, 1128-byte head", unsafe.Sizeof(requestFields16Head2K{}), 2048},
	}
	for _, tc := range tests {
		if tc.size != tc.want {
			t.Errorf("%s: %d bytes, want %d", tc.name, tc.size, tc.want)
		}
	}
}
