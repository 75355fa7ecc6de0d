package whirlwind_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/examples/whirlwind"
	"github.com/sandstorm-go/sandstorm/stage"
)

func start(t *testing.T, srv *whirlwind.Server) *stage.Manager {
	t.Helper()
	m, err := srv.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func stop(t *testing.T, m *stage.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Err() != nil {
		t.Fatal(m.Err())
	}
}

// hangGuard bounds waits on the server; it decides no result.
const hangGuard = 20 * time.Second

func response(t *testing.T, srv *whirlwind.Server) whirlwind.Response {
	t.Helper()
	select {
	case r := <-srv.Responses():
		return r
	case <-time.After(hangGuard):
		t.Fatal("no response (hang)")
		return whirlwind.Response{}
	}
}

func decision(t *testing.T, srv *whirlwind.Server) whirlwind.Decision {
	t.Helper()
	select {
	case d := <-srv.Decisions():
		return d
	case <-time.After(hangGuard):
		t.Fatal("no decision (hang)")
		return whirlwind.Decision{}
	}
}

// TestDegradationUnderLoad: with the file handlers saturated, one request
// of many connections gets full quality, two get low quality (the cost
// limit is 12), and all the others get an immediate 503.
func TestDegradationUnderLoad(t *testing.T) {
	srv := whirlwind.New(map[string]int{"/files/a.png": 4096})
	m := start(t, srv)
	srv.Hold()
	const n = 60
	for id := 0; id < n; id++ {
		r := whirlwind.Request{Conn: fmt.Sprint("c", id), ID: id, Session: fmt.Sprint("s", id%7),
			Role: whirlwind.Role(id % 3), Path: "/files/a.png", Last: true}
		if err := srv.Send(m, r); err != nil {
			t.Fatal(err)
		}
	}
	outcomes := map[whirlwind.Outcome]int{}
	decided := map[int]whirlwind.Outcome{}
	for i := 0; i < n; i++ {
		d := decision(t, srv)
		outcomes[d.Outcome]++
		decided[d.ID] = d.Outcome
	}
	if outcomes[whirlwind.AdmittedFull] != 1 || outcomes[whirlwind.AdmittedLow] != 2 || outcomes[whirlwind.Rejected] != n-3 {
		t.Fatalf("outcomes %v", outcomes)
	}
	answered := map[int]whirlwind.Response{}
	for i := 0; i < n-3; i++ { // the 503s come while the handlers are still busy
		r := response(t, srv)
		if r.Status != 503 || !r.Close || decided[r.ID] != whirlwind.Rejected {
			t.Fatalf("while saturated: %v (decision %q)", r, decided[r.ID])
		}
		answered[r.ID] = r
	}
	srv.Release()
	for i := 0; i < 3; i++ {
		r := response(t, srv)
		want := map[whirlwind.Outcome]whirlwind.Response{
			whirlwind.AdmittedFull: {Status: 200, Quality: whirlwind.Full, Bytes: 4096},
			whirlwind.AdmittedLow:  {Status: 200, Quality: whirlwind.Low, Bytes: 1024},
		}[decided[r.ID]]
		if r.Status != want.Status || r.Quality != want.Quality || r.Bytes != want.Bytes {
			t.Fatalf("%v for a request with decision %q", r, decided[r.ID])
		}
		answered[r.ID] = r
	}
	stop(t, m)
	if len(answered) != n || srv.Lost() != 0 || srv.Discarded() != 0 {
		t.Fatalf("%d of %d answered, %d lost, %d discarded", len(answered), n, srv.Lost(), srv.Discarded())
	}
	fh, _ := m.Stage("FileHandler")
	if st := fh.Stats(); st.RejectedPredicate != 2*(n-3)+2 {
		t.Fatalf("file handler predicate rejected %d, want %d", st.RejectedPredicate, 2*(n-3)+2)
	}
}

// TestPipelinesAnswerInOrder: many connections pipeline requests of mixed
// cost (404 at once, files through the disk); every connection gets its
// answers in request order, up to one that closes it, and every request is
// answered or (after a close) discarded.
func TestPipelinesAnswerInOrder(t *testing.T) {
	srv := whirlwind.New(map[string]int{"/files/a.png": 4096, "/files/b.png": 100})
	m := start(t, srv)
	const conns, perConn = 40, 6
	paths := []string{"/files/a.png", "/about", "/files/b.png", "/files/missing", "/files/a.png", "/index"}
	sent := map[string][]int{}
	id := 0
	for c := 0; c < conns; c++ {
		conn := fmt.Sprint("c", c)
		for k := 0; k < perConn; k++ {
			r := whirlwind.Request{Conn: conn, ID: id, Session: fmt.Sprint("s", c%5), Role: whirlwind.Role(c % 3),
				Path: paths[(c+k)%len(paths)], Last: k == perConn-1}
			if err := srv.Send(m, r); err != nil {
				t.Fatal(err)
			}
			sent[conn] = append(sent[conn], id)
			id++
		}
	}
	got := map[string][]whirlwind.Response{}
	total := 0
	deadline := time.After(hangGuard)
	for total+int(srv.Discarded()) < conns*perConn {
		select {
		case r := <-srv.Responses():
			got[r.Conn] = append(got[r.Conn], r)
			total++
		case <-time.After(5 * time.Millisecond): // look at Discarded again
		case <-deadline:
			t.Fatalf("answered %d, discarded %d of %d (hang)", total, srv.Discarded(), conns*perConn)
		}
	}
	stop(t, m)
	for conn, ids := range sent {
		rs := got[conn]
		for i, r := range rs {
			if r.ID != ids[i] {
				t.Fatalf("%s: answer %d is for request %d, want %d (order broken): %v", conn, i, r.ID, ids[i], rs)
			}
			if r.Close && i != len(rs)-1 {
				t.Fatalf("%s: answers after a close: %v", conn, rs)
			}
		}
		if len(rs) < len(ids) && (len(rs) == 0 || !rs[len(rs)-1].Close) {
			t.Fatalf("%s: %d of %d answered without a close: %v", conn, len(rs), len(ids), rs)
		}
	}
	t.Logf("answered %d, discarded %d", total, srv.Discarded())
	if total+int(srv.Discarded()) != conns*perConn || srv.Lost() != 0 {
		t.Fatalf("answered %d + discarded %d != %d, lost %d", total, srv.Discarded(), conns*perConn, srv.Lost())
	}
}

// TestPoisonFileContained: a request that crashes AsyncFile gets a 500
// (the Dispatcher monitors the file stages), AsyncFile is restarted by its
// supervisor, and the next request is served.
func TestPoisonFileContained(t *testing.T) {
	srv := whirlwind.New(map[string]int{"/files/a.png": 4096})
	m := start(t, srv)
	_ = srv.Send(m, whirlwind.Request{Conn: "c1", ID: 1, Session: "s1", Path: whirlwind.PoisonPath, Last: true})
	if r := response(t, srv); r.ID != 1 || r.Status != 500 {
		t.Fatalf("poison: %v", r)
	}
	_ = srv.Send(m, whirlwind.Request{Conn: "c2", ID: 2, Session: "s1", Path: "/files/a.png", Last: true})
	// The file handler may not have returned the first request's cost
	// yet: the second is served at full or low quality.
	if r := response(t, srv); r.ID != 2 || r.Status != 200 {
		t.Fatalf("after the restart: %v", r)
	}
	stop(t, m)
	disk, _ := m.Stage("AsyncFile")
	files, _ := m.Stage("FileHandler")
	if d, f := disk.Stats(), files.Stats(); d.Restarts != 1 || d.Failures != 1 || f.Restarts != 0 {
		t.Fatalf("AsyncFile %+v, FileHandler restarts %d", d, f.Restarts)
	}
	var outcomes []whirlwind.Outcome
	for len(srv.Decisions()) > 0 {
		outcomes = append(outcomes, (<-srv.Decisions()).Outcome)
	}
	if !slices.Equal(outcomes[:2], []whirlwind.Outcome{whirlwind.AdmittedFull, whirlwind.Failed}) || len(outcomes) != 3 || outcomes[2] == whirlwind.Rejected {
		t.Fatalf("decisions %v", outcomes)
	}
}
