package http

import (
	"strings"
	"sync/atomic"
	"testing"
)

// Two Parsers of one event loop share its spare (Parser.loopSpare): a
// request recycled by one is the memory of the next request either of
// them makes in the 512-byte class, zeroed but for the new head; a
// request not recycled is never reused; a head too large for the class
// leaves the spare where it is.
func TestParserLoopSpare(t *testing.T) {
	var loop atomic.Pointer[requestHead512]
	a, b := &Parser{loopSpare: &loop}, &Parser{loopSpare: &loop}
	parse := func(p *Parser, head string) *Request {
		t.Helper()
		reqs, err := p.Feed(nil, []byte(head))
		if err != nil || len(reqs) != 1 {
			t.Fatalf("Feed(%q) = %d requests, %v", head, len(reqs), err)
		}
		return reqs[0]
	}
	r1 := parse(a, "GET /one HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n")
	r1.SetPrincipal("someone")
	if !a.recycle(r1) {
		t.Fatal("the last request was not taken back")
	}
	if loop.Load() == nil {
		t.Fatal("a recycled request did not become the loop's spare")
	}
	r2 := parse(b, "GET /two HTTP/1.1\r\nHost: y\r\n\r\n")
	if r2 != r1 {
		t.Error("the other parser of the loop did not reuse the loop's spare")
	}
	if r2.Path != "/two" || r2.Host != "y" || len(r2.Header) != 1 || r2.PrincipalValue() != nil {
		t.Errorf("reused request: path %q, host %q, %d fields, principal %v: not made anew", r2.Path, r2.Host, len(r2.Header), r2.PrincipalValue())
	}
	if loop.Load() != nil {
		t.Error("the spare in use is still the loop's")
	}
	r3 := parse(a, "GET /three HTTP/1.1\r\nHost: z\r\n\r\n")
	if r3 == r2 {
		t.Fatal("a request in use was handed out again")
	}
	if r1.Path != "/two" {
		t.Errorf("the request in use changed: path %q", r1.Path)
	}
	// A head beyond the 512-byte class does not take the loop's spare.
	if !a.recycle(r3) {
		t.Fatal("the last request was not taken back")
	}
	big := "GET /big HTTP/1.1\r\nHost: x\r\nX-Long: " + strings.Repeat("a", 200) + "\r\n\r\n"
	if r4 := parse(b, big); r4 == r3 {
		t.Error("a large head was made in the loop's 512-byte spare")
	}
	if loop.Load() == nil {
		t.Error("a large head took the loop's spare")
	}
}
