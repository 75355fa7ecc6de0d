package haboob_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/http"
)

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		fields []string // Accept-Encoding field values (nil: no field)
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"gzip, deflate, br"}, true},
		{[]string{"br;q=1.0, gzip;q=0.8, *;q=0.1"}, true},
		{[]string{"deflate, br"}, false},
		{[]string{"identity"}, false},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip;q=0.0"}, false},
		{[]string{"gzip;q=0.000"}, false},
		{[]string{"gzip;q=0.001"}, true},
		{[]string{"gzip; q=0.5"}, true},
		{[]string{"gzip ; Q=1"}, true},
		{[]string{"gzip;q=1.000"}, true},
		{[]string{"gzip;q=1.001"}, false}, // not a qvalue
		{[]string{"gzip;q=2"}, false},
		{[]string{"gzip;q=0.5000"}, false},
		{[]string{"gzip;q=abc"}, false},
		{[]string{"gzip;q="}, false},
		{[]string{"gzip;level=1"}, true}, // other parameters do not weigh
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false}, // gzip named: * does not apply
		{[]string{"gzip;q=0, *"}, false},
		{[]string{"gzip, *;q=0"}, true},
		{[]string{"gzip, gzip;q=0"}, false}, // contradicting: refused
		{[]string{"deflate", "gzip"}, true}, // several fields are one list
		{[]string{"gzip", "gzip;q=0"}, false},
		{[]string{" , ,gzip"}, true},
		{[]string{"gzipx"}, false},
		{[]string{"gzip-x, xgzip"}, false},
	}
	for _, tt := range tests {
		var h http.Header
		for _, v := range tt.fields {
			h.Add("accept-encoding", v)
		}
		h.Add("Accept", "gzip") // another field: ignored
		if got := haboob.AcceptsGzip(h); got != tt.want {
			t.Errorf("AcceptsGzip(%q) = %v, want %v", tt.fields, got, tt.want)
		}
	}
}

// FuzzAcceptsGzip checks the parser never panics and agrees with a plain
// reading: gzip is accepted only if the text names gzip or "*", and a
// list that names gzip with q=0 (and nothing else) never accepts it.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "*", "*;q=0, gzip;q=0.5", "br, x-gzip;q=0.9", ";;,,q=", "gzip;q=1.0000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{{Name: "Accept-Encoding", Value: v}}
		got := haboob.AcceptsGzip(h)
		if got && !containsFold(v, "gzip") && !containsFold(v, "*") {
			t.Fatalf("AcceptsGzip(%q) = true without gzip or *", v)
		}
		// Appending a refusal of gzip always wins.
		h = append(h, http.Field{Name: "Accept-Encoding", Value: "gzip;q=0"})
		if haboob.AcceptsGzip(h) {
			t.Fatalf("AcceptsGzip(%q + gzip;q=0) = true", v)
		}
	})
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		ok := true
		for j := range len(sub) {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
