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
// stage Work, recording their idempotency keys, once started: with
// status (statusOK if 0), except that the first mute requests get no
// answer, after which it leaves (unsubscribes) if leave.
type fakeInstance struct {
	t      *testing.T
	n      *Node
	inst   string
	status byte
	mute   int
	leave  bool
	mu     sync.Mutex
	ids    []string
	sub    *nats.Subscription
}

func (f *fakeInstance) start(nc *nats.Conn) {
	f.t.Helper()
	sub, err := nc.Subscribe(f.n.directSubject("Work", f.inst), func(m *nats.Msg) {
		q, err := f.n.wire.decodeRequest(m.Data)
		if err != nil {
			f.t.Error(err)
			return
		}
		f.mu.Lock()
		f.ids = append(f.ids, q.id)
		muted, leave, sub := len(f.ids) <= f.mute, len(f.ids) == f.mute && f.leave, f.sub
		f.mu.Unlock()
		if leave {
			_ = sub.Unsubscribe()
			_ = nc.Flush()
		}
		if muted {
			return
		}
		_ = m.Respond(encodeVerdict(&verdict{status: f.status, inst: f.inst}, q.version))
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.sub = sub
	f.mu.Unlock()
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
		rejoining bool // this node reconnected to NATS just now
		wantWaits uint64
		wantLog   string
		wantDead  bool // a rejected request: ib1 taken for dead (no responders)
	}{
		{name: "reply, its home back: delivered there", timeout: time.Minute, home: "ib1", late: true,
			wantInst: "ib1", wantWaits: 1, wantLog: `msg="remote: reply waiting for its home" node=w replica=f1`},
		{name: "outcome, its replica back: delivered there", timeout: time.Minute, late: true,
			wantInst: "ib1", wantWaits: 1, wantLog: `msg="remote: transaction outcome waiting for its replica" node=w replica=f1`},
		{name: "reply, its home never back: rejected at the timeout", timeout: 300 * time.Millisecond, home: "ib1",
			wantErr: "reply to f1 not delivered within 300ms: no responders on its subject", wantWaits: 1, wantDead: true,
			wantLog: `msg="remote: reply not delivered in time" node=w replica=f1 why="no responders on its subject`},
		{name: "outcome, no responders while this node rejoins: a wait, its replica kept", timeout: 300 * time.Millisecond, rejoining: true,
			wantErr: "transaction outcome to f1 not delivered within 300ms: no responders while this node rejoins NATS", wantWaits: 1,
			wantLog: `msg="remote: transaction outcome waiting for its replica" node=w replica=f1 why="no responders while this node rejoins NATS`},
		{name: "reply to an instance never heard of: by load", timeout: time.Minute, home: "nobody", wantInst: "ib2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, s, nc, logs := boundSender(t, tc.timeout)
			if tc.rejoining {
				n.link.reconnected(time.Now())
			}
			ib1, ib2 := &fakeInstance{t: t, n: n, inst: "ib1"}, &fakeInstance{t: t, n: n, inst: "ib2"}
			ib2.start(nc)
			to := s.heard("ib1", "f1")
			s.heard("ib2", "f2")
			known := to
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
			if tc.wantErr != "" && known.dead.Load() != tc.wantDead {
				t.Fatalf("ib1 taken for dead: %v, want %v", known.dead.Load(), tc.wantDead)
			}
		})
	}
}

// boundSender joins a node w with an in-process NATS server and returns
// it, its sender of stage Work (remote timeout: timeout), another
// connection to the server (for fake instances) and the node's log.
func boundSender(t *testing.T, timeout time.Duration) (*Node, *stageSender, *nats.Conn, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	n, err := Join(ClusterConfig{Node: "w"}, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	sk, err := n.StageSink("Work", StageConfig{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(n.srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return n, sk.(*stageSender), nc, logs
}

// TestBoundRequestToDeadReplicaOutlivesItsRotation: a bound request
// resent to a replica found with no responders (dead) waits for its own
// answer even when the watch takes that replica out of rotation
// meanwhile, as its next sweep does. Were the wait ended then
// (errOutOfRotation), a reply whose home never came back, its resend
// waiting for NATS's "no responders" on a loaded machine, would be
// rejected as one that may have arrived. The replica here takes the
// request and never answers, so the request ends by its own timeout.
func TestBoundRequestToDeadReplicaOutlivesItsRotation(t *testing.T) {
	n, s, nc, _ := boundSender(t, time.Minute)
	replica := &fakeInstance{t: t, n: n, inst: "ib1", mute: 1}
	replica.start(nc)
	rs := s.heard("ib1", "f1")
	rs.dead.Store(true) // an earlier attempt had no responders
	data, err := n.wire.encodeRequest(nil, &request{op: opEnqueue, id: "key1", events: []sink.Event{"x"}}, "Work")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.requestBound(&nats.Msg{Subject: rs.subject, Data: data}, rs, 300*time.Millisecond)
		done <- err
	}()
	for len(replica.got()) == 0 {
		time.Sleep(time.Millisecond)
	}
	rs.rot.Load().cancel() // the sweep takes the dead replica out of rotation
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("no answer")
	}
	if !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("got %v, want the request's own timeout (not the rotation's end)", err)
	}
}

// TestResendNotHandedOver: a reply to a home this sender never heard
// of, whose first attempt may have reached it (no verdict in time) and
// which then has no responders, is not handed to another replica by
// load (another front could take it twice): it waits for its home and
// is rejected at the timeout as one that may have arrived.
func TestResendNotHandedOver(t *testing.T) {
	n, s, nc, logs := boundSender(t, 600*time.Millisecond)
	home := &fakeInstance{t: t, n: n, inst: "ib3", mute: 1, leave: true}
	other := &fakeInstance{t: t, n: n, inst: "ib2"}
	home.start(nc)
	other.start(nc)
	s.heard("ib2", "f2")
	data, err := n.wire.encodeRequest(nil, &request{op: opEnqueue, id: "key1", events: []sink.Event{"x"}}, "Work")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.roundTrip(data, nil, nil, "ib3")
	if got := other.got(); len(got) != 0 {
		t.Fatalf("another replica got %v: a resend that may have reached its home was handed over", got)
	}
	if !errors.Is(err, sink.ErrRejected) || !errors.Is(err, errMayHaveArrived) ||
		!strings.Contains(err.Error(), "reply to ib3 (not heard from yet) not confirmed (it may have arrived) within 600ms") {
		t.Fatalf("got %v; want a rejection saying the reply may have arrived", err)
	}
	if got := home.got(); len(got) != 1 || got[0] != "key1" {
		t.Fatalf("the home got %v, want key1 once", got)
	}
	if !strings.Contains(logs.String(), `msg="remote: reply waiting for its home" node=w replica="ib3 (not heard from yet)"`) {
		t.Fatalf("no wait logged naming the home:\n%s", logs.String())
	}
}

// txnPredicate is a sender-side predicate that admits everything and
// counts how its events were completed.
type txnPredicate struct {
	mu              sync.Mutex
	done, cancelled int
}

func (p *txnPredicate) Accept(sink.Event) bool { return true }
func (p *txnPredicate) Done(sink.Event, time.Duration, time.Duration) {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
}
func (p *txnPredicate) Cancel(sink.Event) { p.mu.Lock(); p.cancelled++; p.mu.Unlock() }

// TestCommitOutcome: a Commit's outcome as the sender sees it: confirmed
// (Done); refused by its replica, or never delivered (not kept: Cancel,
// LostOutcomes); unknown when an attempt may have arrived but no verdict
// came, or the replica no longer holds the transaction (ErrOutcomeUnknown,
// Done, UnknownOutcomes, logged as unknown).
func TestCommitOutcome(t *testing.T) {
	tests := []struct {
		name        string
		timeout     time.Duration
		replica     *fakeInstance // its behaviour (nil: never there)
		wantUnknown bool
		wantKept    bool // no error at all
		wantDone    int
		wantLost    uint64
		wantLog     string
	}{
		{name: "confirmed", timeout: time.Minute, replica: &fakeInstance{}, wantKept: true, wantDone: 1},
		{name: "refused: aborted there", timeout: time.Minute, replica: &fakeInstance{status: statusRejected},
			wantLost: 1, wantLog: `msg="remote: transaction commit refused by its replica: not kept"`},
		{name: "not held there (forgotten): unknown", timeout: time.Minute, replica: &fakeInstance{status: statusNotHeld},
			wantUnknown: true, wantDone: 1, wantLog: `level=WARN msg="remote: transaction outcome unknown: the replica may have kept it"`},
		{name: "no verdict, then its replica gone: unknown", timeout: 600 * time.Millisecond, replica: &fakeInstance{mute: 1, leave: true},
			wantUnknown: true, wantDone: 1, wantLog: `level=WARN msg="remote: transaction outcome unknown: the replica may have kept it"`},
		{name: "no verdict at all: unknown", timeout: 300 * time.Millisecond, replica: &fakeInstance{mute: 100},
			wantUnknown: true, wantDone: 1, wantLog: `level=WARN msg="remote: transaction outcome unknown: the replica may have kept it"`},
		{name: "never delivered: not kept", timeout: 300 * time.Millisecond,
			wantLost: 1, wantLog: `msg="remote: transaction outcome not delivered"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, s, nc, logs := boundSender(t, tc.timeout)
			if tc.replica != nil {
				tc.replica.t, tc.replica.n, tc.replica.inst = t, n, "ib1"
				tc.replica.start(nc)
			}
			pred := &txnPredicate{}
			s.SetPredicate(pred)
			tk, err := s.admit([]sink.Event{"x"})
			if err != nil {
				t.Fatal(err)
			}
			txn := &remoteTxn{s: s, id: "txn1", rs: s.heard("ib1", "f1"), n: 1, es: []sink.Event{"x"}, ticket: tk, start: time.Now()}
			txn.Commit()
			err = txn.Err()
			st := s.Stats()
			switch {
			case tc.wantKept && err != nil:
				t.Fatalf("Err() = %v, want nil", err)
			case !tc.wantKept && (!errors.Is(err, sink.ErrRejected) || errors.Is(err, ErrOutcomeUnknown) != tc.wantUnknown):
				t.Fatalf("Err() = %v; want a rejection, ErrOutcomeUnknown: %v", err, tc.wantUnknown)
			}
			wantUnknown := uint64(0)
			if tc.wantUnknown {
				wantUnknown = 1
			}
			if pred.done != tc.wantDone || pred.cancelled != 1-tc.wantDone || st.LostOutcomes != tc.wantLost || st.UnknownOutcomes != wantUnknown {
				t.Fatalf("%d Done, %d Cancel, LostOutcomes %d, UnknownOutcomes %d; want %d Done, LostOutcomes %d, UnknownOutcomes %d",
					pred.done, pred.cancelled, st.LostOutcomes, st.UnknownOutcomes, tc.wantDone, tc.wantLost, wantUnknown)
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Fatalf("log lacks %q:\n%s", tc.wantLog, logs.String())
			}
		})
	}
}
