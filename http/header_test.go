package http

import (
	"reflect"
	"testing"
)

func TestCanonicalKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"content-type", "Content-Type"},
		{"CONTENT-TYPE", "Content-Type"},
		{"Content-Type", "Content-Type"},
		{"x-forwarded-for", "X-Forwarded-For"},
		{"sec-ch-ua", "Sec-Ch-Ua"},
		{"etag", "Etag"},
		{"a--b", "A--B"},
		{"-x", "-X"},
		{"x_y", "X_y"},
		{"", ""},
		{"bad name", "bad name"},
		{"caf\xc3\xa9", "caf\xc3\xa9"},
	}
	for _, tc := range tests {
		if got := CanonicalKey(tc.in); got != tc.want {
			t.Errorf("CanonicalKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CanonicalKey("Content-Type") }); n != 0 {
		t.Errorf("CanonicalKey of a canonical name allocates %v times", n)
	}
}

func TestHeader(t *testing.T) {
	var h Header
	if h.Get("X") != "" || h.Has("X") || h.Values("X") != nil || h.Count("X") != 0 {
		t.Fatal("nil Header not empty")
	}
	h.Add("accept", "a")
	h.Add("X-Multi", "1")
	h.Add("x-multi", "2")
	h.Add("Host", "h")
	h.Add("X-MULTI", "3")

	if got := h.Get("ACCEPT"); got != "a" {
		t.Errorf("Get = %q", got)
	}
	if v, ok := h.Lookup("host"); v != "h" || !ok {
		t.Errorf("Lookup = %q, %v", v, ok)
	}
	if got := h.Values("x-multi"); !reflect.DeepEqual(got, []string{"1", "2", "3"}) {
		t.Errorf("Values = %q", got)
	}
	if h.Count("X-Multi") != 3 {
		t.Errorf("Count = %d", h.Count("X-Multi"))
	}

	c := h.Clone()
	h.Set("x-multi", "only")
	want := Header{{"Accept", "a"}, {"X-Multi", "only"}, {"Host", "h"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("after Set: %q", h)
	}
	if c.Count("X-Multi") != 3 {
		t.Error("Clone shares storage")
	}
	h.Set("New", "n")
	h.Del("accept")
	want = Header{{"X-Multi", "only"}, {"Host", "h"}, {"New", "n"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("after Set and Del: %q", h)
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.Get("host") }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
}

func TestHasToken(t *testing.T) {
	tests := []struct {
		v, token string
		want     bool
	}{
		{"close", "close", true},
		{"Keep-Alive, Upgrade", "upgrade", true},
		{" , close ,", "close", true},
		{"closed", "close", false},
		{"", "close", false},
		{"100-continue", "100-continue", true},
	}
	for _, tc := range tests {
		if got := hasToken(tc.v, tc.token); got != tc.want {
			t.Errorf("hasToken(%q, %q) = %v", tc.v, tc.token, got)
		}
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/a/b", "/a/b"},
		{"/a/b/", "/a/b/"},
		{"a/b", "/a/b"},
		{"//a//b//", "/a/b/"},
		{"/a/./b", "/a/b"},
		{"/a/../b", "/b"},
		{"/../..", "/"},
		{"/../../x/", "/x/"},
		{"/a/.", "/a"},
		{"/a/..", "/"},
		{"/a/.b/..c/", "/a/.b/..c/"},
		{"/.well-known/x", "/.well-known/x"},
	}
	for _, tc := range tests {
		if got := cleanPath(tc.in); got != tc.want {
			t.Errorf("cleanPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRequestQuery(t *testing.T) {
	r := mustParse(t, "GET /s?q=go+lang&n=1&n=2&bad=%zz HTTP/1.1\r\nHost: h\r\n\r\n")
	q := r.Query()
	if q.Get("q") != "go lang" || len(q["n"]) != 2 || r.RawQuery != "q=go+lang&n=1&n=2&bad=%zz" {
		t.Fatalf("Query = %v", q)
	}
	if !r.ProtoAtLeast(1, 1) || r.ProtoAtLeast(1, 2) || r.ProtoAtLeast(2, 0) {
		t.Fatal("ProtoAtLeast")
	}
}
