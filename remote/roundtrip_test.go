package remote

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
)

// fakeInstance answers the requests on one instance's direct subject of
// stage Work, recording their idempotency keys, once started.
type fakeInstance struct {
	t    *testing.T
	n    *Node
	inst string
	mu   sync.Mutex
	ids  []string
}

func (f *fakeInstance) start(nc *nats.Conn) {
	f.t.Helper()
	if _, err := nc.Subscribe(f.n.directSubject("Work", f.inst), func(m *nats.Msg) {
		q, err := f.n.wire.decodeRequest(m.Data)
		if err != nil {
			f.t.Error(err)
			return
		}
		f.mu.Lock()
		f.ids = append(f.ids, q.id)
		f.mu.Unlock()
		_ = m.Respond(encodeVerdict(&verdict{status: statusOK, inst: f.inst}, q.version))
	}); err != nil {
		f.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeInstance) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// TestBoundTrip: a request bound to one instance (a reply to its home,
// a transaction's outcome to its replica) that finds no responders there
// waits for the instance, counted once as a wait and logged, and goes to
// it alone with its own key once it is there; one whose instance never
// comes is rejected at the stage's timeout, counted and logged. A home
// never heard of (no replica of the stage) leaves the choice to the load.
func TestBoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		timeout   time.Duration
		home      string // "": the request goes to ib1's replica as a transaction's outcome
		late      bool   // ib1 starts answering once the request waits
		wantErr   string // "": delivered to wantInst
		wantInst  string
		wantWaits uint64
		wantLog   string
	}{
		{name: "reply, its home back: delivered there", timeout: time.Minute, home: "ib1", late: true,
			wantInst: "ib1", wantWaits: 1, wantLog: `msg="remote: reply waiting for its home" node=w replica=f1`},
		{name: "outcome, its replica back: delivered there", timeout: time.Minute, late: true,
			wantInst: "ib1", wantWaits: 1, wantLog: `msg="remote: transaction outcome waiting for its replica" node=w replica=f1`},
		{name: "reply, its home never back: rejected at the timeout", timeout: 300 * time.Millisecond, home: "ib1",
			wantErr: "not delivered within 300ms", wantWaits: 1, wantLog: `msg="remote: cut off from NATS: reply not delivered in time"`},
		{name: "reply to an instance never heard of: by load", timeout: time.Minute, home: "nobody", wantInst: "ib2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			n, err := Join(ClusterConfig{Node: "w"}, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			sk, err := n.StageSink("Work", StageConfig{Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			s := sk.(*stageSender)
			nc, err := nats.Connect("", nats.InProcessServer(n.srv))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ib1, ib2 := &fakeInstance{t: t, n: n, inst: "ib1"}, &fakeInstance{t: t, n: n, inst: "ib2"}
			ib2.start(nc)
			to := s.heard("ib1", "f1")
			s.heard("ib2", "f2")
			if tc.home != "" {
				to = nil
			}
			data, err := n.wire.encodeRequest(nil, &request{op: opEnqueue, id: "key1", events: []sink.Event{"x"}}, "Work")
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				v   *verdict
				err error
			}
			done := make(chan result, 1)
			go func() {
				v, _, err := s.roundTrip(data, nil, to, tc.home)
				done <- result{v, err}
			}()
			if tc.late {
				for s.Stats().Waits == 0 {
					time.Sleep(time.Millisecond)
				}
				ib1.start(nc)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute): // a hang guard
				t.Fatal("no verdict")
			}
			st := s.Stats()
			switch {
			case tc.wantErr != "":
				if !errors.Is(r.err, sink.ErrRejected) || !strings.Contains(r.err.Error(), tc.wantErr) || st.Rejected != 1 {
					t.Fatalf("got %v (%d rejections counted); want one rejection saying %q", r.err, st.Rejected, tc.wantErr)
				}
			case r.err != nil || r.v.inst != tc.wantInst:
				t.Fatalf("got %+v, %v; want the verdict of %s", r.v, r.err, tc.wantInst)
			}
			if st.Waits != tc.wantWaits {
				t.Fatalf("%d waits counted, want %d", st.Waits, tc.wantWaits)
			}
			if tc.wantInst == "ib1" {
				if got := ib2.got(); len(got) != 0 {
					t.Fatalf("ib2 got %v: a bound request went to another instance", got)
				}
				for _, id := range ib1.got() {
					if id != "key1" {
						t.Fatalf("ib1 got key %q, want key1 every time", id)
					}
				}
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Fatalf("log lacks %q:\n%s", tc.wantLog, logs.String())
			}
		})
	}
}
