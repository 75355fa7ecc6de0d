package remote

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestWholeRequestRefusalCountsEachCaller: when a combined request fails
// as a whole (the replica could not decode it, its verdict has the wrong
// number of groups, or cannot be decoded), every caller in it is refused
// and counted, as if each had sent alone: Rejected rises by the callers,
// not by one for the request.
func TestWholeRequestRefusalCountsEachCaller(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(groups int) []byte // the answer to a request of groups
	}{
		{"replica could not decode", func(int) []byte {
			return encodeVerdict(&verdict{status: statusError, detail: verdictDetail{Node: "held", Stage: "Work", Reason: "cannot decode"}}, WireVersion)
		}},
		{"verdict for a wrong number of groups", func(groups int) []byte {
			return encodeVerdict(&verdict{status: statusEach, inst: "held", each: make([]byte, groups+1)}, WireVersion)
		}},
		{"verdict not decodable", func(int) []byte { return []byte{0xff, 0xfe} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, s, nc, _ := boundSender(t, time.Minute)
			held := heldReplica(t, n, nc)
			const callers = 40
			errs, done := enqueueAll(s, callers)
			for answered := false; !answered; {
				select {
				case m := <-held:
					q, err := n.wire.decodeRequest(m.Data)
					if err != nil {
						t.Fatal(err)
					}
					body := tc.answer(len(q.events))
					if err := m.Respond(body); err != nil {
						t.Fatal(err)
					}
				case <-done:
					answered = true
				case <-time.After(time.Minute): // a hang guard
					t.Fatal("callers still waiting after a minute")
				}
			}
			for i, err := range errs {
				if !errors.Is(err, sink.ErrRejected) {
					t.Fatalf("caller %d: %v, want a rejection", i, err)
				}
			}
			if st := s.Stats(); st.Rejected != callers || st.Events != 0 {
				t.Fatalf("sender counts %d rejected and %d admitted, want %d and 0", st.Rejected, st.Events, callers)
			}
		})
	}
}

// shrinkingLimit is a batchSender whose combinedLimit can shrink (the
// server's maximum payload after a reconnect): it holds its first
// request until release is closed, and records the encoded bytes of
// every request it sends.
type shrinkingLimit struct {
	limit   atomic.Int64
	release chan struct{}
	first   sync.Once
	mu      sync.Mutex
	sizes   []int // encoded bytes of each request, in order
	held    atomic.Bool
}

func (f *shrinkingLimit) sendEach(_ *combiner, batch []*pending) {
	size := 0
	for _, p := range batch {
		size += len(p.enc)
		p.err = nil
	}
	f.mu.Lock()
	f.sizes = append(f.sizes, size)
	f.mu.Unlock()
	f.first.Do(func() { f.held.Store(true); <-f.release })
}

func (f *shrinkingLimit) combinedLimit() int { return int(f.limit.Load()) }

// TestRoundSplitWhenLimitShrinks: callers that joined a round under one
// request limit, sent after the limit shrank (a reconnect to a server
// with a smaller maximum payload), go out in requests within the new
// limit, and every one gets its verdict.
func TestRoundSplitWhenLimitShrinks(t *testing.T) {
	c := &combiner{}
	f := &shrinkingLimit{release: make(chan struct{})}
	f.limit.Store(1 << 20)
	const others, encoded, shrunk = 30, 100, 350
	errs := make([]error, others+1)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Go(func() {
			errs[i] = c.enqueue(f, &pending{wake: make(chan struct{}, 1), enc: make([]byte, encoded)})
		})
	}
	call(0)
	waitUntil(t, "the first request held", f.held.Load)
	for i := range others {
		call(i + 1)
	}
	waitUntil(t, "every other caller in a round", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waiting == others && len(c.rounds) == 1
	})
	f.limit.Store(shrunk)
	close(f.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for i, size := range f.sizes {
		total += size / encoded
		if i > 0 && size > shrunk {
			t.Fatalf("request %d carried %d bytes after the limit shrank to %d (requests %v)", i, size, shrunk, f.sizes)
		}
	}
	if total != others+1 {
		t.Fatalf("requests carried %d callers, want %d (requests %v)", total, others+1, f.sizes)
	}
}
