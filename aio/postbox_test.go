package aio

import (
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Senders on several goroutines, a poster and the maintenance goroutine's
// drains at once, with a sink that rejects now and then: every event is
// delivered exactly once, each sender's in the order it sent them, and
// the postbox ends empty. (The claim and its end are compare-and-swaps
// outside mu: this is the test that they lose nothing.)
func TestPostboxConcurrentSendersDeliverEverythingInOrder(t *testing.T) {
	tests := []struct {
		name        string
		rejectEvery int  // 0: never
		maintenance bool // posts, and a goroutine draining (the retries)
	}{
		// Without rejections or posts the senders deliver everything
		// themselves: a sender that finds the box busy leaves its event
		// to the busy one, which must take it before it lets go.
		{"accepting sink, senders only", 0, false},
		{"accepting sink", 0, true},
		{"sink rejecting every 7th event", 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const senders, perSender = 4, 2000
			type ev struct{ from, n int }
			var mu sync.Mutex
			var got []ev
			calls := 0
			to := fnSink(func(e sink.Event) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if tt.rejectEvery > 0 && calls%tt.rejectEvery == 0 {
					return sink.ErrRejected
				}
				got = append(got, e.(ev))
				return nil
			})
			var o postbox
			var wg sync.WaitGroup
			for g := range senders {
				wg.Go(func() {
					for n := range perSender {
						if tt.maintenance && g == 0 && n%3 == 0 {
							o.post(delivery{to: to, ev: ev{g, n}})
							continue
						}
						o.send(delivery{to: to, ev: ev{g, n}})
					}
				})
			}
			stop := make(chan struct{})
			drained := make(chan struct{})
			go func() { // the maintenance goroutine's retries
				defer close(drained)
				for {
					select {
					case <-stop:
						return
					default:
						if tt.maintenance {
							o.drain()
						}
					}
				}
			}()
			wg.Wait()
			close(stop)
			<-drained
			if !tt.maintenance && !o.empty() {
				t.Fatal("events left waiting with nobody delivering them")
			}
			for !o.drain() {
			}
			if !o.empty() {
				t.Fatal("the postbox is not empty after a drain that reported it empty")
			}
			if len(got) != senders*perSender {
				t.Fatalf("delivered %d events, want %d", len(got), senders*perSender)
			}
			next := make([]int, senders)
			for _, e := range got {
				if e.n != next[e.from] {
					t.Fatalf("sender %d: got event %d, want %d", e.from, e.n, next[e.from])
				}
				next[e.from]++
			}
		})
	}
}

// A sender that finds another delivering leaves its event to it: the
// delivering one's end of claim takes the event, and the box is empty.
func TestPostboxEndOfClaimTakesWhatWasQueued(t *testing.T) {
	var got []sink.Event
	to := fnSink(func(e sink.Event) error { got = append(got, e); return nil })
	var o postbox
	if !o.claim() {
		t.Fatal("an empty postbox could not be claimed")
	}
	if o.empty() {
		t.Error("a claimed postbox reports empty")
	}
	if o.send(delivery{to: to, ev: 2}) {
		t.Fatal("send delivered while another goroutine held the claim")
	}
	if err := to.Enqueue(1); err != nil { // the claimer's own event
		t.Fatal(err)
	}
	if !o.delivered(delivery{}, nil) || !o.empty() {
		t.Fatalf("the end of the claim left events waiting (empty %v)", o.empty())
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("delivered %v, want [1 2]", got)
	}
}
