package aio

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// idleGrainTimeout is long enough that the maintenance goroutine's own
// idle checks (at real times) never close the test's connection; its
// activity grain is the 100 ms cap.
const idleGrainTimeout = time.Hour

// Progress within the grain of the last stored activity is not stored
// (activity lags it), and the idle check allows for that lag: at exactly
// the idle timeout after the unstored progress the connection is kept,
// and it is closed once quiet for the timeout and the grain after the
// activity stored. (Times are given, not read: sink.Nanotime values.)
func TestIdleCheckAllowsForTheActivityGrain(t *testing.T) {
	checkLeaks(t)
	srv, _, c, _ := serverConn(t, SocketConfig{IdleTimeout: idleGrainTimeout})
	idle, grain := int64(idleGrainTimeout), activityGrain(idleGrainTimeout)
	if grain <= 1 {
		t.Fatalf("activity grain %d for an idle timeout of %v: want more than 1 ns", grain, idleGrainTimeout)
	}
	t0 := sink.Nanotime()
	c.activity.Store(t0)
	steps := []struct {
		name         string
		progress     int64 // 0: none
		wantActivity int64
		check        int64 // closeIdle's now
		wantClosed   bool
	}{
		{"progress just within the grain is not stored", t0 + grain - 1, t0, t0 + grain - 1 + idle, false},
		{"progress a grain later is stored", t0 + grain, t0 + grain, t0 + grain + idle, false},
		{"quiet for the timeout and the grain after it", 0, t0 + grain, t0 + grain + idle + grain + 1, true},
	}
	for _, st := range steps {
		if st.progress != 0 {
			c.noteActivity(st.progress)
		}
		if got := c.activity.Load(); got != st.wantActivity {
			t.Fatalf("%s: activity t0%+d, want t0%+d", st.name, got-t0, st.wantActivity-t0)
		}
		srv.eng.closeIdle(st.check)
		if closed := srv.Stats().IdleClosed != 0; closed != st.wantClosed {
			t.Fatalf("%s: closed as idle %v, want %v", st.name, closed, st.wantClosed)
		}
	}
	waitCond(t, "the idle connection to close", func() bool { return c.Stats().Closed })
}

// Input that arrives when activity is more than a grain behind refreshes
// it: set back (as if quiet for two grains), then the peer sends, and
// the idle check an idle timeout after the send keeps the connection.
func TestInputRefreshesLaggingActivity(t *testing.T) {
	checkLeaks(t)
	srv, _, c, client := serverConn(t, SocketConfig{IdleTimeout: idleGrainTimeout})
	reader := newRecorder("reader")
	if err := c.StartReader(reader); err != nil {
		t.Fatal(err)
	}
	grain := activityGrain(idleGrainTimeout)
	sent := sink.Nanotime()
	c.activity.Store(sent - 2*grain)
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	reader.wait(t, "the packet", func(evs []sink.Event) bool { return count[Packet](evs) == 1 })
	if got := c.activity.Load(); got < sent {
		t.Fatalf("activity %d ns before the input was sent: the input did not refresh it", sent-got)
	}
	srv.eng.closeIdle(sent + int64(idleGrainTimeout))
	if st := c.Stats(); st.Closed || srv.Stats().IdleClosed != 0 {
		t.Fatalf("stats %+v: closed as idle an idle timeout after its last input", st)
	}
}
