package remote

import (
	"strings"
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

// TestHomeAcrossOutage: a request bound to its home (a reply) goes to the
// home's replica while this node is rejoining NATS, however long its
// silence, is resolved again when sent again, and never goes to the
// stage's queue group (where another front could take it).
func TestHomeAcrossOutage(t *testing.T) {
	s, clock, _ := watchedSender(t, StageConfig{})
	f1, f2 := s.heard("ib1", "f1"), s.heard("ib2", "f2")
	steps := []struct {
		name    string
		before  func()
		advance time.Duration
		home    string
		want    *replicaState // nil: rejected (wantErr) or the queue group
		wantErr string
	}{
		{name: "cut off for 3s: the stale home", before: s.n.link.disconnected, advance: 3 * time.Second, home: "ib1", want: f1},
		{name: "cut off: no home, the queue group (rejected at once as cut off)", home: ""},
		{name: "back, not swept yet: still the stale home", before: func() { s.n.link.reconnected(time.Now()) }, home: "ib2", want: f2},
		{name: "back for long, still stale: rejected, not the queue group", before: func() { s.n.link.reconnected(time.Now().Add(-time.Hour)) },
			home: "ib1", wantErr: "no replica of the stage in rotation"},
		{name: "a staleness period from the first sweep since, both silent: out of rotation", advance: 1300 * time.Millisecond,
			home: "ib1", wantErr: "no replica of the stage in rotation"},
		{name: "the other front heard again: it takes the home's", before: func() { s.heard("ib2", "f2") }, home: "ib1", want: f2},
		{name: "the home heard again", before: func() { s.heard("ib1", "f1") }, home: "ib1", want: f1},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		sweepFor(s, clock, st.advance)
		got, err := s.destination(nil, st.home)
		switch {
		case st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)):
			t.Errorf("%s: destination = %s, %v; want the error %q", st.name, instOf(got), err, st.wantErr)
		case st.wantErr == "" && (err != nil || got != st.want):
			t.Errorf("%s: destination = %s, %v; want %s", st.name, instOf(got), err, instOf(st.want))
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

// TestResendResolvesHome: a request sent again resolves its home again
// (a stand-in becomes the replica heard since), and one that may have
// reached its replica is not handed to another.
func TestResendResolvesHome(t *testing.T) {
	s, clock, _ := watchedSender(t, StageConfig{})
	standIn := s.homeReplica("ib1") // not heard yet
	f1 := s.heard("ib1", "f1")
	if got, err := s.resend(standIn, nil, "ib1", 0); err != nil || got != f1 {
		t.Fatalf("resend after the home was heard = %s %v (stand-in: %v); want its replica", instOf(got), err, got == standIn)
	}
	s.heard("ib2", "f2")
	clock.advance(900 * time.Millisecond)
	s.heard("ib2", "f2")
	sweepFor(s, clock, 200*time.Millisecond) // ib1 silent for 1.1s: out
	if !f1.out.Load() {
		t.Fatal("the silent home is still in rotation")
	}
	if _, err := s.resend(f1, nil, "ib1", 1); err == nil || !strings.Contains(err.Error(), "may have been admitted") {
		t.Fatalf("resend after a timeout, the home out: %v; want a rejection", err)
	}
	if got, err := s.resend(f1, nil, "ib1", 0); err != nil || got.inst != "ib2" {
		t.Fatalf("resend never heard (link down), the home out: %s, %v; want the other replica", instOf(got), err)
	}
}
