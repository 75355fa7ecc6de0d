package http_test

import (
	"fmt"
	"testing"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestClassAndPrincipalReachPredicates sends requests with X-Class headers
// through a real socket and checks that the stage's admission predicate
// sees each request's class and principal through package enqueuepred,
// and refuses class 0 (503) while admitting class 2.
func TestClassAndPrincipalReachPredicates(t *testing.T) {
	cfg := http.ServerConfig{Principal: func(r *http.Request) any {
		return enqueuepred.Principal{ID: "user-" + r.Path[1:], Priority: 1}
	}}
	f := startServer(t, cfg, func(req *http.Request) {
		p := req.Principal()
		body := fmt.Sprintf("class=%d principal=%s/%d/%d", enqueuepred.ClassOf(req), p.ID, p.Class, p.Priority)
		_ = http.Respond(req, http.OK("text/plain", []byte(body)))
	})
	st, _ := f.m.Stage("App")
	st.Sink().SetPredicate(sink.PredicateFunc(func(e sink.Event) bool {
		return enqueuepred.ClassOf(e) > 0 // class 0 is refused: 503
	}))
	tests := []struct {
		header string
		status int
		body   string
	}{
		{"X-Class: 2\r\n", 200, "class=2 principal=user-a/2/1"},
		{"x-class: 1\r\n", 200, "class=1 principal=user-a/1/1"},
		{"", 503, ""},
	}
	c, br := f.dial(t)
	for _, tt := range tests {
		fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: x\r\n%s\r\n", tt.header)
		resp, body := readResponse(t, br, "GET")
		if resp.StatusCode != tt.status || tt.status == 200 && body != tt.body {
			t.Errorf("header %q: got %d %q, want %d %q", tt.header, resp.StatusCode, body, tt.status, tt.body)
		}
	}
}

func TestRequestPrincipalValues(t *testing.T) {
	var r http.Request
	r.SetClass(3)
	tests := []struct {
		attached any
		want     enqueuepred.Principal
	}{
		{nil, enqueuepred.Principal{Class: 3}},
		{"alice", enqueuepred.Principal{ID: "alice", Class: 3}},
		{enqueuepred.Principal{ID: "bob", Class: 1}, enqueuepred.Principal{ID: "bob", Class: 1}},
		{&enqueuepred.Principal{ID: "carol"}, enqueuepred.Principal{ID: "carol", Class: 3}},
		{42, enqueuepred.Principal{Class: 3}},
	}
	for _, tt := range tests {
		r.SetPrincipal(tt.attached)
		if got := r.Principal(); got != tt.want {
			t.Errorf("SetPrincipal(%v): Principal() = %+v, want %+v", tt.attached, got, tt.want)
		}
		if r.PrincipalValue() != tt.attached {
			t.Errorf("PrincipalValue() = %v, want %v", r.PrincipalValue(), tt.attached)
		}
		if c := enqueuepred.ClassOf(&r); c != 3 {
			t.Errorf("ClassOf = %d, want 3", c)
		}
	}
}
