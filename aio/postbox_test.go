package aio

import (
	"fmt"
	"slices"
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
		perSender   int
	}{
		// Without rejections or posts the senders deliver everything
		// themselves: a sender that finds the box busy leaves its event
		// to the busy one, which must take it before it lets go.
		// A lost wake-up (an end of claim that clears the claim after
		// a queue it did not see) shows in a narrow window: more events.
		{"accepting sink, senders only", 0, false, 2000},
		{"accepting sink", 0, true, 2000},
		{"sink rejecting every 7th event", 7, true, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const senders = 4
			perSender := tt.perSender
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
						if !tt.maintenance {
							if err := o.stranded(); err != nil {
								t.Errorf("sender %d, event %d: %v", g, n, err)
								return
							}
						}
					}
				})
			}
			stop := make(chan struct{})
			drained := make(chan struct{})
			var watchErr error
			go func() { // the maintenance goroutine's retries, or a watch
				defer close(drained)
				for {
					select {
					case <-stop:
						return
					default:
						if tt.maintenance {
							o.drain()
						} else if err := o.stranded(); err != nil && watchErr == nil {
							watchErr = err
						}
					}
				}
			}()
			wg.Wait()
			close(stop)
			<-drained
			if watchErr != nil {
				t.Errorf("while senders ran: %v", watchErr)
			}
			if !tt.maintenance && (!o.empty() || o.waiting() > 0) {
				t.Fatalf("%d events left waiting with nobody delivering them (empty %v)", o.waiting(), o.empty())
			}
			for !o.drain() {
			}
			if !o.empty() || o.waiting() > 0 {
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

// waiting is how many events q holds.
func (o *postbox) waiting() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.q.len()
}

// stranded reports an event waiting that nobody will deliver: q holds
// events but boxQueued is clear, so the next claim succeeds and delivers
// past them, and its end of claim does not look at q. (q and boxQueued
// change together under mu, so holding mu sees them agree.)
func (o *postbox) stranded() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := o.q.len(); n > 0 && o.state.Load()&boxQueued == 0 {
		return fmt.Errorf("%d events waiting, but the box's state %#b does not say so", n, o.state.Load())
	}
	return nil
}

// An event queued while the box is claimed is left to the claimer: its
// end of claim (delivered) must deliver it, or, if its own event was
// rejected, report the box not empty with both waiting in order, for the
// retry. A release that clears the claim without looking at what was
// queued strands the event.
func TestPostboxEndOfClaimTakesWhatWasQueued(t *testing.T) {
	rejected := fmt.Errorf("full: %w", sink.ErrRejected)
	tests := []struct {
		name      string
		claimed   error // the sink's answer to the claimer's own event
		wantEmpty bool
		want      []sink.Event // delivered by the end of claim
	}{
		{"claimer's event accepted", nil, true, []sink.Event{1, 2}},
		{"claimer's event rejected", rejected, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []sink.Event
			to := fnSink(func(e sink.Event) error { got = append(got, e); return nil })
			o := postbox{hooks: &countingHooks{}}
			if !o.claim() {
				t.Fatal("an empty postbox could not be claimed")
			}
			if o.empty() {
				t.Error("a claimed postbox reports empty")
			}
			if o.queue(delivery{to: to, ev: 2}) {
				t.Fatal("queue delivered while another goroutine held the claim")
			}
			if o.claim() {
				t.Fatal("a claimed postbox was claimed again")
			}
			if err := o.stranded(); err != nil {
				t.Fatalf("after queue: %v", err)
			}
			if tt.claimed == nil {
				if err := to.Enqueue(1); err != nil { // the claimer's own event
					t.Fatal(err)
				}
			}
			if empty := o.delivered(delivery{to: to, ev: 1}, tt.claimed); empty != tt.wantEmpty {
				t.Fatalf("end of claim reported empty %v, want %v", empty, tt.wantEmpty)
			}
			if err := o.stranded(); err != nil {
				t.Fatalf("after the end of claim: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("end of claim delivered %v, want %v", got, tt.want)
			}
			if o.empty() != tt.wantEmpty || (o.waiting() == 0) != tt.wantEmpty {
				t.Fatalf("after the end of claim: empty %v, %d waiting; want empty %v", o.empty(), o.waiting(), tt.wantEmpty)
			}
			if o.claim() != tt.wantEmpty {
				t.Fatalf("claim after the end of claim succeeded %v, want %v (events waiting must be delivered first)", !tt.wantEmpty, tt.wantEmpty)
			}
			if !tt.wantEmpty {
				if !o.drain() || !slices.Equal(got, []sink.Event{1, 2}) {
					t.Fatalf("the retry delivered %v, want [1 2]", got)
				}
			}
		})
	}
}
