package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func TestOrdersAPI(t *testing.T) {
	svc, err := newService(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.handler)
	defer func() {
		srv.Close()
		if err := svc.m.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	post := func(body string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/orders", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, strings.TrimSpace(string(b))
	}

	resp, body := post(`{"item":"widget","qty":3}`)
	var rc Receipt
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &rc) != nil || rc.Total != 7.5 || rc.ID == "" {
		t.Fatalf("order: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"item":"widget","qty":0}`, `{"error":"qty must be between 1 and 1000"}`},
		{`{"item":"sprocket","qty":1}`, `{"error":"no such item \"sprocket\""}`},
	} {
		if resp, body := post(tc.body); resp.StatusCode != 422 || body != tc.want {
			t.Errorf("%s: %d %s, want 422 %s", tc.body, resp.StatusCode, body, tc.want)
		}
	}
	if resp, _ := post(`{"item":`); resp.StatusCode != 400 {
		t.Errorf("bad JSON: %d", resp.StatusCode)
	}

	// Reserve refusing work (as its full queue does under overload): the
	// client gets 503 with Retry-After at once.
	reserve, _ := svc.m.Stage("Reserve")
	reserve.Sink().SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return false }))
	resp, body = post(`{"item":"widget","qty":1}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("overloaded: %d %s Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	reserve.Sink().SetPredicate(nil)
	if resp, body := post(`{"item":"gadget","qty":1}`); resp.StatusCode != 200 {
		t.Fatalf("after overload: %d %s", resp.StatusCode, body)
	}
}

// TestLoadGenerator runs the load generator briefly against the service:
// every answer is a 200 or a 503 with Retry-After.
func TestLoadGenerator(t *testing.T) {
	svc, err := newService(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.handler)
	defer func() {
		srv.Close()
		_ = svc.m.Shutdown(context.Background())
	}()
	r, err := runLoad(context.Background(), srv.URL+"/orders", 8, 200*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	for code := range r.byStatus {
		if code != 200 && code != 503 {
			t.Errorf("status %d in %v", code, r)
		}
	}
	if r.byStatus[200] == 0 || r.noRetry != 0 || r.errors != 0 {
		t.Errorf("load: %v", r)
	}
}
