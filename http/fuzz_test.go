package http

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	nethttp "net/http"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fuzzSeeds are requests good and bad beyond the parser tables.
var fuzzSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?b HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /c HTTP/1.0\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: T\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n",
	"GET http://h/x HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"GET /%41%2F%2e%2E/b/ HTTP/1.1\r\nHost: [::1]:80\r\nX-Class: 3\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/1.1\nHost: h\nA: b\n\n",
	"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n c\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	// Pipelined: the later requests are compared too.
	"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /2?q=%41 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /3 HTTP/1.0\r\n\r\n",
	"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\nA: b\r\n c\r\n\r\n",
	"HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n",
}

// fuzzLimits are small enough for short inputs to reach every limit.
var fuzzLimits = Limits{MaxLine: 24, MaxHeaderBytes: 48, MaxHeaders: 3, MaxBody: 16}

// outcome is everything a Feed sequence produces, comparable.
type outcome struct {
	reqs   []summary
	status int
	cause  error
}

func run(p *Parser, pieces [][]byte) outcome {
	reqs, err := feedPieces(p, pieces)
	var o outcome
	for _, r := range reqs {
		o.reqs = append(o.reqs, summarize(r))
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return outcome{status: -1}
		}
		o.status, o.cause = e.Status, e.Err
	}
	return o
}

// cut splits data into pieces whose sizes cycle through sizes.
func cut(data []byte, sizes ...int) [][]byte {
	var pieces [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(data))
		pieces = append(pieces, data[:n])
		data = data[n:]
	}
	return pieces
}

func FuzzParser(f *testing.F) {
	for _, tc := range validRequests {
		f.Add([]byte(tc.in))
	}
	for _, tc := range badRequests {
		f.Add([]byte(tc.in))
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The outcome does not depend on how the input is split, with default
		// limits or with limits small enough to be hit.
		for _, lim := range []Limits{{}, fuzzLimits} {
			whole := run(&Parser{Limits: lim, Now: newTestParser().Now}, [][]byte{data})
			if whole.status == -1 {
				t.Fatal("error that is not an *Error")
			}
			for _, pieces := range [][][]byte{cut(data, 1), cut(data, 2, 3, 5, 8, 13), cut(data, 7)} {
				got := run(&Parser{Limits: lim, Now: newTestParser().Now}, pieces)
				if !reflect.DeepEqual(got, whole) {
					t.Fatalf("limits %+v: split input gives\n%+v\nwhole input gives\n%+v", lim, got, whole)
				}
			}
			for _, s := range whole.reqs {
				checkInvariants(t, s, lim.withDefaults())
			}
		}

		p := newTestParser()
		reqs, err := p.Feed(nil, data)
		compareWithNetHTTP(t, data, reqs, err)
	})
}

// checkInvariants checks what every accepted request guarantees.
func checkInvariants(t *testing.T, s summary, lim Limits) {
	t.Helper()
	if !isToken(s.Method) || s.Major() != 1 {
		t.Fatalf("accepted method %q proto %q", s.Method, s.Proto)
	}
	switch {
	case s.Path == "*" && s.Target == "*":
	case s.Path == "" && !strings.HasPrefix(s.Target, "/"):
	default:
		if cleanPath(s.Path) != s.Path || s.Path[0] != '/' {
			t.Fatalf("Path %q of %q is not clean", s.Path, s.Target)
		}
	}
	if int64(len(s.Body)) > lim.MaxBody {
		t.Fatalf("body of %d bytes over the limit", len(s.Body))
	}
	for _, h := range append(slices.Clone(s.Header), s.Trailer...) {
		if !isToken(h.Name) || CanonicalKey(h.Name) != h.Name || trimOWS(h.Value) != h.Value {
			t.Fatalf("field %q: %q", h.Name, h.Value)
		}
	}
	if len(s.Header) > lim.MaxHeaders || len(s.Trailer) > lim.MaxHeaders {
		t.Fatalf("%d fields, %d trailer fields over the limit", len(s.Header), len(s.Trailer))
	}
}

func (s summary) Major() int {
	if len(s.Proto) == len("HTTP/1.1") {
		return int(s.Proto[5] - '0')
	}
	return -1
}

// compareWithNetHTTP checks that every request of a pipelined input that
// net/http.ReadRequest accepts, and whose body it reads without error, is
// accepted and read alike by the parser, unless the parser rejects it for
// one of its documented, deliberate strictnesses, each checked here on
// net/http's own reading. The comparison goes on request after request
// while net/http accepts them, and stops after a request that closes the
// connection (the parser ignores what follows it).
func compareWithNetHTTP(t *testing.T, data []byte, reqs []*Request, err error) {
	t.Helper()
	rd := bytes.NewReader(data)
	br := bufio.NewReader(rd)
	for i := 0; ; i++ {
		start := len(data) - rd.Len() - br.Buffered() // where request i begins
		nreq, nerr := nethttp.ReadRequest(br)
		if nerr != nil {
			return
		}
		body, berr := io.ReadAll(nreq.Body)
		if berr != nil {
			return
		}
		if i >= len(reqs) {
			if err == nil {
				t.Fatalf("net/http read a whole request #%d (%q), the parser wants more input", i, nreq.RequestURI)
			}
			if why := excuse(data[start:], nreq, err); why == "" {
				t.Fatalf("net/http accepts request #%d %s %q %s, the parser says %v", i, nreq.Method, nreq.RequestURI, nreq.Proto, err)
			}
			return
		}
		compareRequest(t, i, reqs[i], nreq, body)
		if reqs[i].Close {
			return
		}
	}
}

// compareRequest checks that the parser read request #i as net/http did.
func compareRequest(t *testing.T, i int, r *Request, nreq *nethttp.Request, body []byte) {
	t.Helper()
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request #%d: %s: parser %#v, net/http %#v", i, what, got, want)
		}
	}
	check("method", r.Method, nreq.Method)
	check("request URI", r.Target, nreq.RequestURI)
	check("proto", r.Proto, nreq.Proto)
	check("major", r.Major, nreq.ProtoMajor)
	check("minor", r.Minor, nreq.ProtoMinor)
	check("host", r.Host, nreq.Host)
	if nreq.URL.Host == "" { // net/http's Host is then the Host field, which ReadRequest deletes
		check("Host field", r.Header.Get("Host"), nreq.Host)
	}
	check("Connection field", r.Header.Get("Connection"), nreq.Header.Get("Connection"))
	check("close", r.Close, nreq.Close)
	check("chunked", r.Chunked, len(nreq.TransferEncoding) > 0)
	check("body", string(r.Body), string(body))
	if !r.Chunked {
		check("content length", int64(len(r.Body)), nreq.ContentLength)
		check("Content-Length field", r.Header.Get("Content-Length"), nreq.Header.Get("Content-Length"))
	}
	if nreq.URL.Opaque == "" && r.Path != "" && r.Path != "*" {
		check("path", r.Path, wantPath(nreq.URL.Path))
		check("query", r.RawQuery, nreq.URL.RawQuery)
	}

	// Every field, except those net/http consumes or synthesizes.
	skip := func(name string) bool {
		switch name {
		case "Transfer-Encoding", "Host":
			return true
		case "Content-Length", "Trailer":
			return r.Chunked
		case "Cache-Control": // net/http adds it for "Pragma: no-cache"
			return !r.Header.Has(name)
		}
		return false
	}
	for name, values := range nreq.Header {
		if !skip(name) {
			want := values
			if name == "Content-Length" {
				want = []string{values[0]} // net/http dedups them
				check(name+" count", slices.Compact(r.Header.Values(name)), want)
				continue
			}
			check(name+" values", r.Header.Values(name), want)
		}
	}
	for _, h := range r.Header {
		if _, ok := nreq.Header[h.Name]; !ok && !skip(h.Name) {
			t.Fatalf("request #%d: field %q unknown to net/http", i, h.Name)
		}
	}
	for name, values := range nreq.Trailer {
		if values != nil { // declared in Trailer but not received: nil
			check(name+" trailer", r.Trailer.Values(name), values)
		}
	}
	for _, h := range r.Trailer {
		check(h.Name+" trailer", nreq.Trailer[h.Name], r.Trailer.Values(h.Name))
	}
}

// wantPath is what Request.Path should be for a decoded URL path.
func wantPath(p string) string {
	if p == "" {
		return "/"
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// excuse explains why the parser may reject a request net/http.ReadRequest
// accepts, judging from net/http's reading and the raw bytes, or returns ""
// when it may not.
func excuse(data []byte, nreq *nethttp.Request, err error) string {
	lowerData := bytes.ToLower(data)
	rawField := func(name string) bool {
		return bytes.Contains(lowerData, []byte("\n"+name+":"))
	}
	switch {
	case errors.Is(err, ErrVersion):
		if nreq.ProtoMajor != 1 {
			return "not HTTP/1.x (505)"
		}
	case errors.Is(err, ErrTarget):
		if nreq.RequestURI == "" {
			return "empty request-target (RFC 9112 §3.2; net/http takes it for CONNECT)"
		}
	case errors.Is(err, ErrObsFold):
		if bytes.Contains(data, []byte("\n ")) || bytes.Contains(data, []byte("\n\t")) {
			return "obsolete line folding (RFC 9112 §5.2)"
		}
	case errors.Is(err, ErrHost):
		host, ok := rawFieldValue(data, "host") // ReadRequest deletes Host from Header
		if !ok && nreq.ProtoMinor >= 1 && nreq.Method != "CONNECT" {
			return "HTTP/1.1 without Host (RFC 9112 §3.2; net/http's server rejects it too)"
		}
		if ok && strings.ContainsFunc(host, func(c rune) bool {
			return !(c < 0x80 && (c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
				strings.ContainsRune("!$%&'()*+,-.:;=[]_~", c)))
		}) {
			return "invalid Host (net/http's server rejects it too)"
		}
	case errors.Is(err, ErrFraming):
		if nreq.ProtoMinor == 0 && rawField("transfer-encoding") {
			return "Transfer-Encoding in HTTP/1.0 (RFC 9112 §6.1)"
		}
		if len(nreq.TransferEncoding) > 0 && rawField("content-length") {
			return "Content-Length with Transfer-Encoding (RFC 9112 §6.1)"
		}
	case errors.Is(err, ErrMalformed):
		for name := range nreq.Header {
			if strings.ContainsAny(name, " \t") {
				return "whitespace before colon (RFC 9112 §5.1; net/http's server rejects it too)"
			}
		}
		if cs := nreq.Header[DefaultClassHeader]; len(cs) > 0 {
			for _, c := range cs {
				if n, ok := parseDecimal(c); !ok || n > 1<<30 || c != cs[0] {
					return "bad X-Class"
				}
			}
		}
	case errors.Is(err, ErrURITooLong):
		if len(data) > DefaultMaxLine {
			return "request line limit"
		}
	case errors.Is(err, ErrHeaderTooLarge):
		if len(data) > DefaultMaxHeaderBytes || bytes.Count(data, []byte("\n")) > DefaultMaxHeaders {
			return "header limit"
		}
	case errors.Is(err, ErrBodyTooLarge):
		if nreq.ContentLength > DefaultMaxBody {
			return "body limit"
		}
	}
	return ""
}

// rawFieldValue finds the first header line of data's head with this
// lower-case name and returns its trimmed value.
func rawFieldValue(data []byte, name string) (string, bool) {
	head, _, _ := bytes.Cut(data, []byte("\n\r\n"))
	head, _, _ = bytes.Cut(head, []byte("\n\n"))
	lines := strings.Split(string(head), "\n")
	for _, line := range lines[1:] {
		line = strings.TrimSuffix(line, "\r")
		if n, v, ok := strings.Cut(line, ":"); ok && strings.ToLower(n) == name {
			return strings.Trim(v, " \t"), true
		}
	}
	return "", false
}

// FuzzFormatter checks that no status, field or body makes the formatter
// write something other than one well-formed response: net/http reads it
// back exactly, with the one field intact and no field injected.
func FuzzFormatter(f *testing.F) {
	f.Add(200, "Content-Type", "text/plain", []byte("hello"), false, false)
	f.Add(404, "X-Evil", "a\r\nSet-Cookie: x=1\r\n\r\nHTTP/1.1 200 OK", []byte{}, true, false)
	f.Add(304, "Bad Name:", "v", []byte("ignored"), false, true)
	f.Add(0, "Connection", "close", []byte(nil), false, false)
	f.Add(101, "", "\x00\x7f\xff", []byte("x"), false, true)
	f.Fuzz(func(t *testing.T, status int, name, value string, body []byte, head, http10 bool) {
		reqText := "GET / HTTP/1.1\r\nHost: h\r\n\r\n"
		if head {
			reqText = "HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"
		}
		if http10 {
			reqText = strings.Replace(reqText, "1.1", "1.0", 1)
		}
		reqs, err := newTestParser().Feed(nil, []byte(reqText))
		if err != nil {
			t.Fatal(err)
		}
		req := reqs[0]
		resp := &Response{Status: status, Header: Header{{Name: name, Value: value}}, Body: body}
		wire := resp.Append(nil, req, fixedTime)

		nreq, _ := nethttp.NewRequest(req.Method, "/", nil)
		br := bufio.NewReader(bytes.NewReader(wire))
		got, err := nethttp.ReadResponse(br, nreq)
		if err != nil {
			t.Fatalf("net/http cannot read %q: %v", wire, err)
		}
		gotBody, err := io.ReadAll(got.Body)
		if err != nil {
			t.Fatalf("reading body of %q: %v", wire, err)
		}
		if got.StatusCode != resp.status() || br.Buffered() != 0 {
			t.Fatalf("%q: status %d, %d bytes left", wire, got.StatusCode, br.Buffered())
		}
		if resp.SendsBody(req) && string(gotBody) != string(body) || !resp.SendsBody(req) && len(gotBody) != 0 {
			t.Fatalf("%q: body %q", wire, gotBody)
		}
		if got.Close == resp.KeepAlive(req) && !noBody(resp.status()) {
			t.Fatalf("%q: net/http Close=%v, KeepAlive=%v", wire, got.Close, resp.KeepAlive(req))
		}
		// Only the managed fields and the one given field are there.
		var sanitized strings.Builder
		for _, c := range []byte(cmpOr(name, "_")) {
			if !isTokenByte(c) {
				c = '_'
			}
			sanitized.WriteByte(c)
		}
		own := CanonicalKey(sanitized.String())
		for k := range got.Header {
			switch k {
			case "Date", "Server", "Content-Length", "Connection", own:
			default:
				t.Fatalf("%q: field %q injected", wire, k)
			}
		}
	})
}

func cmpOr(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
