package remote

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// logBuffer collects log lines for a test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// take returns the lines logged since the last take.
func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// watchedSender is a request-mode sender with no NATS connection, on a
// fake clock, logging into a buffer: for the replica watch's decisions.
func watchedSender(t testing.TB, rc StageConfig) (*stageSender, *fakeClock, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	n := &Node{cfg: ClusterConfig{Node: "front"}.withDefaults(), log: slog.New(slog.NewTextHandler(logs, nil)), node: "front", inst: "me"}
	s := newStageSender(n, "Work", rc)
	clock := &fakeClock{now: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)}
	s.now = clock.Now
	return s, clock, logs
}

// sweepFor moves the clock by d, sweeping s every heartbeat (100ms) as
// the watch does.
func sweepFor(s *stageSender, clock *fakeClock, d time.Duration) {
	for step := 100 * time.Millisecond; d > 0; d -= step {
		clock.advance(step)
		s.sweep()
	}
}

// checkDepartures checks the lines a step's sweeps logged: wantLog among
// them or, if wantLog is "", no departure at all.
func checkDepartures(t *testing.T, step, wantLog, got string) {
	t.Helper()
	if wantLog != "" && !strings.Contains(got, wantLog) {
		t.Errorf("%s: log lacks %q:\n%s", step, wantLog, got)
	}
	if wantLog == "" && strings.Contains(got, "out of rotation") {
		t.Errorf("%s: unexpected line:\n%s", step, got)
	}
}

func TestReplicaWatch(t *testing.T) {
	s, clock, logs := watchedSender(t, StageConfig{})
	s.sent.Add(1) // a sink in use: it logs departures
	a, b := s.heard("ia", "wa"), s.heard("ib", "wb")
	if got := logs.take(); !strings.Contains(got, `msg="remote: replica joined" replica=wa instance=ia stage=Work`) {
		t.Fatalf("no join line for the first replica:\n%s", got)
	}
	if got := s.Replicas(); got != 2 {
		t.Fatalf("Replicas() = %d, want 2", got)
	}
	steps := []struct {
		name    string
		before  func() // then the clock moves on, sweeping
		advance time.Duration
		wantLog string // in the lines the sweeps log ("": none)
		inRot   map[*replicaState]bool
		allOut  bool // pick finds every known replica out of rotation
	}{
		{name: "both heard within the bound", advance: 900 * time.Millisecond,
			inRot: map[*replicaState]bool{a: true, b: true}},
		{name: "b silent, a beats", before: func() { s.heard("ia", "wa") }, advance: 200 * time.Millisecond,
			wantLog: `msg="remote: replica silent (no heartbeat: gone or hung): out of rotation" replica=wb instance=ib silent=1.1s stage=Work`,
			inRot:   map[*replicaState]bool{a: true, b: false}},
		{name: "a silent with a request waiting", before: func() { a.inflight.Add(1) }, advance: 1100 * time.Millisecond,
			wantLog: `msg="remote: replica not answering (requests waiting): out of rotation" replica=wa instance=ia silent=1.1s waiting=1 stage=Work`,
			inRot:   map[*replicaState]bool{a: false, b: false}, allOut: true},
		{name: "b beats again", before: func() { a.inflight.Add(-1); s.heard("ib", "wb") }, advance: 100 * time.Millisecond,
			inRot: map[*replicaState]bool{a: false, b: true}},
		{name: "b has no responders", before: func() { s.heard("ia", "wa"); b.dead.Store(true) }, advance: 100 * time.Millisecond,
			wantLog: `msg="remote: replica left (no responders on its subject): out of rotation" replica=wb instance=ib stage=Work`,
			inRot:   map[*replicaState]bool{a: true, b: false}},
		{name: "this process paused: no decision", before: func() { clock.advance(5 * time.Second) }, advance: 0,
			inRot: map[*replicaState]bool{a: true, b: false}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		logs.take()
		if st.advance == 0 {
			s.sweep()
		}
		sweepFor(s, clock, st.advance)
		checkDepartures(t, st.name, st.wantLog, logs.take())
		for rs, want := range st.inRot {
			if got := rs.out.Load(); got == want {
				t.Errorf("%s: replica %s out of rotation = %v, want %v", st.name, rs.node, got, !want)
			}
			if cancelled := rs.rot.Load().ctx.Err() != nil; cancelled == want {
				t.Errorf("%s: replica %s: its requests' context cancelled = %v", st.name, rs.node, cancelled)
			}
		}
		picked, allOut := s.pick()
		if allOut != st.allOut {
			t.Errorf("%s: pick allOut = %v, want %v", st.name, allOut, st.allOut)
		}
		if picked != nil && !st.inRot[picked] {
			t.Errorf("%s: picked %s, out of rotation", st.name, picked.node)
		}
	}
	if err := s.noneInRotation(); err == nil || !strings.Contains(err.Error(), "no replica of the stage in rotation") {
		t.Errorf("noneInRotation() = %v", err)
	}
	// Out of rotation for long: forgotten.
	sweepFor(s, clock, forgetAfter+time.Minute)
	if n := len(s.replicas); n != 0 {
		t.Errorf("%d replicas remembered after %v of silence", n, forgetAfter)
	}

	// A sink that never sent says nothing of departures.
	unused, clock2, logs2 := watchedSender(t, StageConfig{})
	unused.heard("ic", "wc")
	for range 20 {
		clock2.advance(100 * time.Millisecond)
		unused.sweep()
	}
	if got := logs2.String(); strings.Contains(got, "out of rotation") || strings.Contains(got, "no replica") {
		t.Errorf("an unused sink logged a departure:\n%s", got)
	}
}

func TestRateLimit(t *testing.T) {
	var r rateLimit
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	for _, st := range []struct {
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{0, true, 0},
		{300 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{1100 * time.Millisecond, true, 2},
		{2200 * time.Millisecond, true, 0},
	} {
		ok, n := r.allow(t0.Add(st.at))
		if ok != st.ok || n != st.wantSuppressed {
			t.Errorf("at %v: allow = %v, %d; want %v, %d", st.at, ok, n, st.ok, st.wantSuppressed)
		}
	}
}

// fakeReplica pretends to be a replica of stage Work on its own NATS
// connection: it beats while beating is set and answers requests (every
// event admitted) only if answer is set.
type fakeReplica struct {
	nc     *nats.Conn
	inst   string
	answer bool
	got    chan struct{} // a request arrived
	stop   chan struct{} // stop beating
	done   chan struct{}
}

func startFakeReplica(t *testing.T, n *Node, inst string, answer bool) *fakeReplica {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(n.srv))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeReplica{nc: nc, inst: inst, answer: answer, got: make(chan struct{}, 16), stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { f.stopBeating(); nc.Close() })
	if _, err := nc.Subscribe(n.directSubject("Work", inst), func(m *nats.Msg) {
		select {
		case f.got <- struct{}{}:
		default:
		}
		if !f.answer {
			return // hung
		}
		q, err := n.wire.decodeRequest(m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		_ = m.Respond(encodeVerdict(&verdict{status: statusEach, inst: inst, each: make([]byte, len(q.events))}, q.version))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(n.cfg.Heartbeat)
		defer tick.Stop()
		for {
			b := appendString(nil, inst)
			b = appendString(b, "node-"+inst)
			b = binary.AppendUvarint(b, 0)
			_ = nc.Publish(n.loadSubject("Work"), binary.AppendUvarint(b, WireVersion))
			select {
			case <-tick.C:
			case <-f.stop:
				return
			}
		}
	}()
	return f
}

func (f *fakeReplica) stopBeating() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

// TestHungReplica: a replica that stops beating while a request waits
// for its verdict is taken out of rotation and the request answered then,
// long before the stage's timeout (a minute here): rejected, or, for an
// idempotent stage, taken by another replica.
func TestHungReplica(t *testing.T) {
	for _, tc := range []struct {
		name       string
		idempotent bool
	}{
		{"rejected", false},
		{"idempotent: another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			n, err := Join(ClusterConfig{Node: "front"}, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			sk, err := n.StageSink("Work", StageConfig{Timeout: time.Minute, Idempotent: tc.idempotent})
			if err != nil {
				t.Fatal(err)
			}
			s := sk.(*stageSender)
			hung := startFakeReplica(t, n, "hung", false)
			for s.Replicas() == 0 {
				time.Sleep(10 * time.Millisecond) // its first heartbeat
			}
			result := make(chan error, 1)
			go func() { result <- s.Enqueue("x") }()
			<-hung.got
			good := startFakeReplica(t, n, "good", true)
			for s.Replicas() < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			hung.stopBeating()
			var err2 error
			select {
			case err2 = <-result:
			case <-time.After(45 * time.Second): // a hang guard, below the stage's timeout
				t.Fatal("the request waited for its hung replica")
			}
			st := s.Stats()
			if tc.idempotent {
				if err2 != nil || st.Failovers != 1 {
					t.Fatalf("Enqueue = %v, failovers %d; want nil, 1", err2, st.Failovers)
				}
				select {
				case <-good.got:
				default:
					t.Fatal("the good replica got no request")
				}
			} else {
				if err2 == nil || !strings.Contains(err2.Error(), "stopped answering") || st.Unanswered != 1 {
					t.Fatalf("Enqueue = %v, unanswered %d; want a 'stopped answering' rejection, 1", err2, st.Unanswered)
				}
			}
			if got := logs.String(); !strings.Contains(got, `msg="remote: replica not answering (requests waiting): out of rotation" node=front replica=node-hung`) {
				t.Fatalf("no WARN line about the hung replica:\n%s", got)
			}
		})
	}
}

// TestSharedDeadline: requests to a replica share one deadline context
// per slice of time, which never ends before per, ends when the replica
// goes out of rotation, and is not shared across rotations or timeouts.
func TestSharedDeadline(t *testing.T) {
	rs := &replicaState{}
	rot := newRotation()
	const per = time.Hour // the slice (per/16) cannot pass during the test
	start := time.Now()
	a, b := rs.deadline(rot, per), rs.deadline(rot, per)
	if a != b {
		t.Fatal("two requests in one slice got two contexts")
	}
	if d, ok := a.Deadline(); !ok || d.Before(start.Add(per)) {
		t.Fatalf("deadline %v, want at least %v", d, start.Add(per))
	}
	if rs.deadline(rot, per/2) == a {
		t.Fatal("another timeout shares the context")
	}
	next := newRotation()
	c := rs.deadline(next, per)
	if c == a {
		t.Fatal("another rotation shares the context")
	}
	rot.cancel()
	if a.Err() == nil {
		t.Fatal("the context outlived its rotation")
	}
	if c.Err() != nil {
		t.Fatal("the next rotation's context ended with the old one")
	}
	next.cancel()
}

// TestDedupOnce: a request id is decided once; a copy arriving while it
// is being decided waits for that verdict, and later copies get it too.
func TestDedupOnce(t *testing.T) {
	d := newDedup(time.Hour, dedupLimit, time.Now)
	deciding, release := make(chan struct{}), make(chan struct{})
	first := make(chan *verdict)
	go func() {
		first <- d.once("a", func() *verdict {
			close(deciding)
			<-release
			return &verdict{status: statusRejected, inst: "x"}
		})
	}()
	<-deciding
	second := make(chan *verdict)
	go func() {
		second <- d.once("a", func() *verdict {
			t.Error("a copy decided again")
			return nil
		})
	}()
	close(release)
	for _, v := range []*verdict{<-first, <-second, d.once("a", func() *verdict {
		t.Error("a later copy decided again")
		return nil
	})} {
		if v == nil || v.status != statusRejected || v.inst != "x" {
			t.Fatalf("verdict %+v, want the first one's", v)
		}
	}
	if v := d.once("b", func() *verdict { return &verdict{status: statusOK} }); v.status != statusOK {
		t.Fatalf("another id: %+v", v)
	}
}
