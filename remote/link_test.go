package remote

import (
	"testing"
	"time"
)

// TestSweepWhileCutOff: a sender cut off from NATS takes no replica out
// of rotation (the silence is its own), gives each a staleness period
// from its return, and takes out one still silent after that.
func TestSweepWhileCutOff(t *testing.T) {
	s, clock, logs := watchedSender(t, StageConfig{})
	s.sent.Add(1) // a sink in use: it logs departures
	a := s.heard("ia", "wa")
	steps := []struct {
		name    string
		before  func()
		advance time.Duration
		inRot   bool   // not taken out, and (once back) heard from within the bound
		wantLog string // "": no departure logged
	}{
		{name: "cut off for 3s", before: s.n.link.disconnected, advance: 3 * time.Second, inRot: true},
		{name: "back: a staleness period from now", before: func() { s.n.link.reconnected(time.Now()) }, advance: 900 * time.Millisecond, inRot: true},
		{name: "still silent after it", advance: 300 * time.Millisecond, inRot: false,
			wantLog: `msg="remote: replica silent (no heartbeat: gone or hung): out of rotation" replica=wa`},
		{name: "cut off again: an out replica stays out", before: s.n.link.disconnected, advance: time.Second, inRot: false},
		{name: "its heartbeat after the return", before: func() { s.n.link.reconnected(time.Now()); s.sweep(); s.heard("ia", "wa") },
			advance: 500 * time.Millisecond, inRot: true},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		logs.take()
		sweepFor(s, clock, st.advance)
		checkDepartures(t, st.name, st.wantLog, logs.take())
		in := !a.out.Load()
		if !s.n.cutOff() {
			in = in && a.inRotation(s.staleBefore())
		}
		if in != st.inRot {
			t.Errorf("%s: in rotation = %v, want %v", st.name, in, st.inRot)
		}
	}
}

// instOf names a replica for a test's error: its instance, or the
// queue group.
func instOf(rs *replicaState) string {
	if rs == nil {
		return "(queue group)"
	}
	return rs.inst
}

// TestResendResolvesHome: a home the sender has not heard of yet has a
// stand-in (not kept: it is no replica of the stage until heard); once
// heard, the home resolves to its replica.
func TestResendResolvesHome(t *testing.T) {
	s, _, _ := watchedSender(t, StageConfig{})
	standIn := s.homeReplica("ib1") // not heard yet
	if standIn == nil || standIn.inst != "ib1" || !s.unheard(standIn) || s.Replicas() != 0 {
		t.Fatalf("stand-in %s (unheard %v), %d replicas; want one for ib1, not kept", instOf(standIn), s.unheard(standIn), s.Replicas())
	}
	f1 := s.heard("ib1", "f1")
	if got := s.homeReplica("ib1"); got != f1 || s.unheard(got) {
		t.Fatalf("home after it was heard = %s (stand-in: %v); want its replica", instOf(got), got == standIn)
	}
	if s.unheard(nil) {
		t.Fatal("a SinkRef's destination (nil) counted as an unheard home")
	}
}
