package remote

import (
	"errors"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestDurableStoreBoundedByTimeout: a publish the stream never
// acknowledges ends within the stage's remote timeout: with attempts of
// at least two seconds, a timeout of 300ms leaves room for one, not
// retries + 1 (the store once took (retries+1) × 2s and more).
func TestDurableStoreBoundedByTimeout(t *testing.T) {
	n, _, _ := versionNode(t)
	const subject = "sandstorm.test.swallow" // no stream: a subscriber that never answers
	sub, err := n.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	s := &durableSender{senderCore: senderCore{n: n, stage: "Swallow", cfg: StageConfig{Timeout: 300 * time.Millisecond, Retries: 2},
		latency: newLatencies()}, subject: subject}
	err = s.store([]sink.Event{"x"})
	if !errors.Is(err, sink.ErrRejected) {
		t.Fatalf("store = %v, want a rejection", err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := sub.Pending(); got != 1 {
		t.Errorf("the stream was asked %d times, want once", got)
	}
	if st := s.Stats(); st.Retransmits != 0 || st.Rejected != 1 {
		t.Errorf("stats %+v, want no retransmission and one rejection", st)
	}
}
