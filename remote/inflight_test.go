package remote

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/sink"
)

// errOdd is heldBatches' verdict for a caller whose first encoded byte
// is odd.
var errOdd = errors.New("odd caller refused")

// heldBatches is a batchSender that holds every request until release
// is closed, records how many it held at once, and refuses the callers
// whose first encoded byte is odd (errOdd), accepting the others.
type heldBatches struct {
	release chan struct{}
	mu      sync.Mutex
	held    int // requests being sent now
	most    int // the most held at once
	events  int // callers carried
}

func (f *heldBatches) sendEach(_ *combiner, batch []*pending) {
	f.mu.Lock()
	f.held++
	f.most = max(f.most, f.held)
	f.events += len(batch)
	f.mu.Unlock()
	<-f.release
	for _, p := range batch {
		p.err = nil
		if p.enc[0]%2 == 1 {
			p.err = errOdd
		}
	}
	f.mu.Lock()
	f.held--
	f.mu.Unlock()
}

func (f *heldBatches) combinedLimit() int { return 1 << 20 }

func (f *heldBatches) holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// TestFullRoundsGoOutWhileOthersWait: while a request waits for its
// verdict, the callers that come gather in rounds of maxCombined; every
// full round is sent at once, up to maxInFlight requests waiting
// together, and the one not full waits. Every caller gets its own
// verdict. Up to maxCombined callers in all (the first one's request
// and maxCombined-1 others), one request is in flight at a time.
func TestFullRoundsGoOutWhileOthersWait(t *testing.T) {
	for _, tc := range []struct {
		others   int // callers that come while the first one's request waits
		together int // requests waiting together once all have come
	}{
		{others: maxCombined - 1, together: 1},
		{others: maxCombined, together: 2},
		{others: 2*maxCombined + 5, together: 3},
		{others: 6 * maxCombined, together: maxInFlight},
	} {
		t.Run(strconv.Itoa(tc.others), func(t *testing.T) {
			c := &combiner{}
			f := &heldBatches{release: make(chan struct{})}
			errs := make([]error, tc.others+1)
			var wg sync.WaitGroup
			call := func(i int) {
				wg.Go(func() {
					errs[i] = c.enqueue(f, &pending{wake: make(chan struct{}, 1), enc: []byte{byte(i % 2)}})
				})
			}
			call(0)
			waitUntil(t, "the first request held", func() bool { return f.holding() == 1 })
			for i := range tc.others {
				call(i + 1)
			}
			queued := tc.others - (tc.together-1)*maxCombined
			waitUntil(t, "every caller in a request or a round", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.waiting == queued && c.woken == 0 && f.holding() == tc.together
			})
			c.mu.Lock()
			inFlight, rounds := c.inFlight, len(c.rounds)
			c.mu.Unlock()
			if want := (queued + maxCombined - 1) / maxCombined; inFlight != tc.together || rounds != want {
				t.Fatalf("%d requests in flight and %d rounds waiting, want %d and %d", inFlight, rounds, tc.together, want)
			}
			close(f.release)
			wg.Wait()
			for i, err := range errs {
				if want := map[bool]error{false: nil, true: errOdd}[i%2 == 1]; err != want {
					t.Fatalf("caller %d: verdict %v, want %v", i, err, want)
				}
			}
			if f.most != tc.together || f.events != tc.others+1 {
				t.Fatalf("at most %d requests held at once carrying %d callers, want %d and %d", f.most, f.events, tc.together, tc.others+1)
			}
			if c.waiting != 0 || len(c.rounds) != 0 || c.woken != 0 || c.leaders != 0 || c.inFlight != 0 {
				t.Fatalf("left waiting %d in %d rounds (%d woken), %d leaders, %d in flight", c.waiting, len(c.rounds), c.woken, c.leaders, c.inFlight)
			}
		})
	}
}

// waitUntil polls cond until it holds (a hang guard of a minute).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
	}
}

// heldReplica takes the requests for stage Work of node n on its queue
// group, over its own connection, and holds them until the test answers.
func heldReplica(t *testing.T, n *Node, nc *nats.Conn) chan *nats.Msg {
	t.Helper()
	held := make(chan *nats.Msg, 64)
	if _, err := nc.QueueSubscribe(n.stageSubject("Work"), "held", func(m *nats.Msg) { held <- m }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return held
}

// answerEach answers request m, one verdict per group: events "e<i>"
// with an odd i refused, the others admitted.
func answerEach(t *testing.T, n *Node, m *nats.Msg) {
	q, err := n.wire.decodeRequest(m.Data)
	if err != nil {
		t.Error(err)
		return
	}
	if q.op != opEach || q.groups != nil {
		t.Errorf("request op %d with groups %v, want opEach, one event a group", q.op, q.groups)
		return
	}
	v := &verdict{status: statusEach, inst: "held", each: make([]byte, len(q.events))}
	for i, e := range q.events {
		if k, _ := strconv.Atoi(strings.TrimPrefix(e.(string), "e")); k%2 == 1 {
			v.each[i] = statusRejected
			v.why = append(v.why, verdictDetail{Node: "held", Stage: "Work", Reason: "odd " + e.(string)})
		}
	}
	if err := m.Respond(encodeVerdict(v, q.version)); err != nil {
		t.Error(err)
	}
}

// enqueueAll runs Enqueue("e<i>") for i below callers, each on its own
// goroutine, and returns their verdicts once all are in (on done).
func enqueueAll(s sink.Sink, callers int) (errs []error, done chan struct{}) {
	errs, done = make([]error, callers), make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs[i] = s.Enqueue(fmt.Sprintf("e%d", i)) })
	}
	go func() { wg.Wait(); close(done) }()
	return errs, done
}

// TestFullRequestsInFlightOverNATS: with a replica holding the requests
// it gets, more Enqueues than one request carries reach it as
// maxInFlight requests at once; answered, every caller gets its own
// event's verdict and the sender counts them.
func TestFullRequestsInFlightOverNATS(t *testing.T) {
	n, s, nc, _ := boundSender(t, time.Hour) // no resend while held
	held := heldReplica(t, n, nc)
	callers := maxInFlight*maxCombined + 1
	errs, done := enqueueAll(s, callers)
	var got []*nats.Msg
	for len(got) < maxInFlight {
		select {
		case m := <-held:
			got = append(got, m)
		case <-time.After(time.Minute): // a hang guard
			t.Fatalf("%d requests held, want %d", len(got), maxInFlight)
		}
	}
	for _, m := range got {
		answerEach(t, n, m)
	}
	for answered := false; !answered; {
		select {
		case m := <-held:
			answerEach(t, n, m)
		case <-done:
			answered = true
		case <-time.After(time.Minute):
			t.Fatal("callers still waiting after a minute")
		}
	}
	for i, err := range errs {
		refused := i%2 == 1
		if refused != (err != nil) || refused && (!errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), fmt.Sprintf("odd e%d", i))) {
			t.Fatalf("caller %d: verdict %v", i, err)
		}
	}
	st := s.Stats()
	if want := uint64(callers / 2); st.Events != uint64(callers)-want || st.Rejected != want {
		t.Fatalf("sender counts %d admitted and %d rejected, want %d and %d", st.Events, st.Rejected, uint64(callers)-want, want)
	}
}

// TestCloseWithRequestsInFlight: the node closing while maxInFlight
// requests wait for verdicts that never come (and more callers wait
// behind them) leaves no caller waiting: each gets an error.
func TestCloseWithRequestsInFlight(t *testing.T) {
	n, s, nc, _ := boundSender(t, time.Hour)
	held := heldReplica(t, n, nc)
	callers := (maxInFlight+1)*maxCombined + 3
	errs, done := enqueueAll(s, callers)
	for range maxInFlight {
		select {
		case <-held:
		case <-time.After(time.Minute): // a hang guard
			t.Fatalf("fewer than %d requests held", maxInFlight)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("callers still waiting a minute after the node closed")
	}
	for i, err := range errs {
		if err == nil {
			t.Fatalf("caller %d admitted by a replica that never answered", i)
		}
	}
}
