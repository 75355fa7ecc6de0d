package nethttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/nethttp"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

type in struct {
	Op string `json:"op"`
}
type out struct {
	Result string `json:"result"`
}

type call = stage.Request[in, out]

// graph: Front answers or forwards to Back; Back panics.
func newGraph(t *testing.T) (*stage.Manager, *stage.Stage) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	back, err := m.CreateStage("Back", stage.TypedFunc(func(batch []*call) error {
		panic("back end down")
	}), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	front, err := m.CreateStage("Front", stage.TypedFunc(func(batch []*call) error {
		for _, r := range batch {
			switch r.Value.Op {
			case "ok":
				r.Reply(out{Result: "done"})
			case "missing":
				r.Fail(nethttp.Error(http.StatusNotFound, "no such thing"))
			case "fail":
				r.Fail(errors.New("secret internal detail"))
			case "back":
				if err := back.Sink().Enqueue(r); err != nil {
					r.Fail(err)
				}
			case "hang":
				// never answered: the caller's timeout decides
			}
		}
		return nil
	}), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m, front
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestJSONStatuses(t *testing.T) {
	_, front := newGraph(t)
	srv := httptest.NewServer(nethttp.JSON[in, out](front.Sink()))
	defer srv.Close()
	timed := nethttp.JSON[in, out](front.Sink())
	timed.Timeout = time.Millisecond
	timedSrv := httptest.NewServer(timed)
	defer timedSrv.Close()
	resp, body := post(t, timedSrv.URL, `{"op":"hang"}`)
	if resp.StatusCode != 504 || strings.TrimSpace(body) != `{"error":"Gateway Timeout"}` {
		t.Errorf("hang: %d %s, want 504", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		body, want string
		code       int
	}{
		{`{"op":"ok"}`, `{"result":"done"}`, 200},
		{`{"op":"missing"}`, `{"error":"no such thing"}`, 404},
		{`{"op":"fail"}`, `{"error":"Internal Server Error"}`, 500},
		{`{"op":"back"}`, `{"error":"Bad Gateway"}`, 502},
		{`{"op":`, ``, 400},
		{`{"op":"ok","extra":1}`, ``, 400},
		{`{"op":"ok"} {}`, ``, 400},
	} {
		resp, body := post(t, srv.URL, tc.body)
		if resp.StatusCode != tc.code || (tc.want != "" && strings.TrimSpace(body) != tc.want) {
			t.Errorf("%s: %d %s, want %d %s", tc.body, resp.StatusCode, body, tc.code, tc.want)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.body, ct)
		}
	}
}

func TestJSONRejectedIs503WithRetryAfter(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	handled := 0
	st, err := m.CreateStage("Full", stage.TypedFunc(func(batch []*call) error {
		handled += len(batch)
		return nil
	}), stage.StageConfig{Predicate: sink.PredicateFunc(func(sink.Event) bool { return false })})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	h := nethttp.JSON[in, out](st.Sink())
	h.RetryAfter = 1500 * time.Millisecond
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _ := post(t, srv.URL, `{"op":"ok"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("got %d Retry-After %q, want 503 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	m.Shutdown(context.Background())
	if handled != 0 {
		t.Fatalf("a rejected request was handled")
	}
}

func TestMiddleware(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("Web", nethttp.Serve(), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-r.Context().Done()
			fmt.Fprintln(w, "too late") // discarded
			return
		}
		w.Header().Set("X-Served", "stage")
		fmt.Fprintln(w, "hello")
	})
	srv := httptest.NewServer(nethttp.Middleware(st.Sink(), 0, 0)(next))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello\n" || resp.Header.Get("X-Served") != "stage" {
		t.Fatalf("got %d %q %v", resp.StatusCode, b, resp.Header)
	}

	timed := httptest.NewServer(nethttp.Middleware(st.Sink(), time.Millisecond, 0)(next))
	defer timed.Close()
	resp, err = http.Get(timed.URL + "/hang")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 504 {
		t.Fatalf("hang: %d, want 504", resp.StatusCode)
	}

	st.Sink().SetPredicate(sink.PredicateFunc(func(sink.Event) bool { return false }))
	resp, err = http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("rejected: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 200},
		{&sink.RejectError{}, 503},
		{&sink.ClosedError{Sink: "x"}, 503},
		{fmt.Errorf("x: %w", stage.ErrCallAbandoned), 503},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), 504},
		{context.Canceled, nethttp.StatusClientClosed},
		{&stage.CallError{Stage: "Front", Err: errors.New("x")}, 500},
		{&stage.CallError{Stage: "Back", Err: errors.New("x")}, 502},
		{&stage.CallError{Err: nethttp.Error(409, "taken")}, 409},
		{errors.New("other"), 500},
	} {
		if got := nethttp.StatusOf(tc.err, "Front"); got != tc.want {
			t.Errorf("StatusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
