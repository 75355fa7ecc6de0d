package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestAfterLinkDown: a request that could not be sent for want of the
// link is rejected at once unless bound (a reply); a bound one waits for
// the link and goes again to its home's replica, or is rejected once the
// stage's timeout has passed or the node closes. Each rejection is
// counted and logged.
func TestAfterLinkDown(t *testing.T) {
	tests := []struct {
		name     string
		bound    bool
		deadline time.Duration // from now
		closing  bool          // the node is closing
		wantErr  string        // "": sent again to the home's replica
		wantLog  string
	}{
		{name: "not bound: rejected at once", deadline: time.Minute,
			wantErr: "this node is cut off from NATS (reconnecting)", wantLog: `msg="remote: cut off from NATS: enqueue rejected"`},
		{name: "bound, the timeout passed: rejected", bound: true, deadline: -time.Millisecond,
			wantErr: "cut off from NATS: not delivered within", wantLog: `msg="remote: cut off from NATS: reply not delivered in time"`},
		{name: "bound, the node closing: rejected", bound: true, deadline: time.Minute, closing: true,
			wantErr: "cut off from NATS: not delivered within", wantLog: `msg="remote: cut off from NATS: reply not delivered in time"`},
		{name: "bound, the link up: sent again to its home", bound: true, deadline: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, logs := watchedSender(t, StageConfig{})
			s.n.ctx, s.n.cancel = context.WithCancel(context.Background())
			defer s.n.cancel()
			if tc.closing {
				s.n.cancel()
			}
			home := s.heard("ib1", "f1")
			other := s.heard("ib2", "f2")
			start := time.Now()
			rs, err := s.afterLinkDown(other, nil, "ib1", 0, tc.bound, start, start.Add(tc.deadline))
			if tc.wantErr == "" {
				if err != nil || rs != home {
					t.Fatalf("got %s, %v; want the home's replica again", instOf(rs), err)
				}
				if st := s.Stats(); st.Rejected != 0 {
					t.Fatalf("%d rejections counted, want none", st.Rejected)
				}
				return
			}
			if !errors.Is(err, sink.ErrRejected) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want a rejection saying %q", err, tc.wantErr)
			}
			if rs != other {
				t.Fatalf("rejected with replica %s, want the one it went to", instOf(rs))
			}
			if st := s.Stats(); st.Rejected != 1 {
				t.Fatalf("%d rejections counted, want 1", st.Rejected)
			}
			if got := logs.take(); !strings.Contains(got, tc.wantLog) {
				t.Fatalf("log lacks %q:\n%s", tc.wantLog, got)
			}
		})
	}
}
