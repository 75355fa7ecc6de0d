package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// How a request-mode sender keeps its replicas in rotation.
//
// Every replica publishes its queue length every heartbeat
// (ClusterConfig.Heartbeat, default 100ms). A sender's watch looks at its
// replicas every heartbeat: one it has not heard from (heartbeat or
// verdict) for three heartbeats, at least a second, or whose subject had
// no responders, is taken out of rotation: the requests waiting for its
// verdict stop waiting (a stage marked `idempotent` sends them once to
// another replica, the others are rejected at once, counted as
// SinkStats.Unanswered) and no new request goes to it. A heartbeat brings
// it back. While every replica it knows is out of rotation, an enqueue is
// rejected at once. Each of these is logged at WARN, at most one line a
// second per cause and stage, with the count of the lines suppressed
// (departures only by a sink that has sent something: a node hears the
// replicas of every stage it does not host, used or not).

// forgetAfter is how long a replica out of rotation is remembered (to
// log its return, and to reject at once while it is the only one).
const forgetAfter = 10 * time.Minute

// errOutOfRotation ends a request whose replica was taken out of
// rotation while the request waited for its verdict.
var errOutOfRotation = errors.New("remote: replica taken out of rotation")

// replicaState is what a sender knows of one replica of its stage.
type replicaState struct {
	inst, node, subject string
	len                 atomic.Int64 // last reported queue length
	inflight            atomic.Int64 // this sender's requests waiting for it
	seen                atomic.Int64 // last heartbeat or verdict, UnixNano
	dead                atomic.Bool  // no responders on its subject
	timedOut            atomic.Int64 // last request attempt to it without a verdict, UnixNano
	out                 atomic.Bool  // out of rotation (the watch decided)
	wire                atomic.Int64 // the wire version its heartbeats carry (0: none heard yet)
	rot                 atomic.Pointer[rotation]
	shared              atomic.Pointer[sharedDeadline] // the requests' current deadline
}

// sharedDeadline is one context, and so one timer, for the requests to a
// replica that start within the same slice of time (per/16, at least
// 1ms): each of them waits for its verdict at least per and at most per
// plus the slice, and none needs a timer of its own.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // never called early: the deadline ends it
	rot    *rotation
	per    time.Duration
	until  time.Time // requests starting before this share ctx
}

// deadline returns the context a request to rs sent now waits in: ended
// when rs goes out of rotation (rot) or after at least per.
func (rs *replicaState) deadline(rot *rotation, per time.Duration) context.Context {
	now := time.Now()
	if d := rs.shared.Load(); d != nil && d.rot == rot && d.per == per && now.Before(d.until) {
		return d.ctx
	}
	slice := max(per/16, time.Millisecond)
	ctx, cancel := context.WithDeadline(rot.ctx, now.Add(per+slice))
	rs.shared.Store(&sharedDeadline{ctx: ctx, cancel: cancel, rot: rot, per: per, until: now.Add(slice)})
	return ctx
}

// rotation is one stay of a replica in rotation: ctx is cancelled when
// it is taken out, which ends the requests waiting for it.
type rotation struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newRotation() *rotation {
	ctx, cancel := context.WithCancel(context.Background())
	return &rotation{ctx: ctx, cancel: cancel}
}

// frontWarnings are a sender's rate-limited WARN lines, one limit per
// cause.
type frontWarnings struct {
	joined, left, silent, timeout, none, cut, wait, undelivered, version rateLimit
}

// warn logs msg at WARN through limit, with the stage and the count of
// the lines suppressed since the last one.
func (s *stageSender) warn(limit *rateLimit, msg string, args ...any) {
	ok, suppressed := limit.allow(s.now())
	if !ok {
		return
	}
	args = append(args, slog.String("stage", s.stage))
	if suppressed > 0 {
		args = append(args, slog.Int("suppressed", suppressed))
	}
	s.n.log.Warn(msg, args...)
}

// staleAfter is how long a replica may be silent before it is taken out
// of rotation: three heartbeats, at least a second (a busy machine delays
// heartbeats; a replica that really died is found at once by "no
// responders" on its subject).
func (s *stageSender) staleAfter() time.Duration { return max(3*s.n.cfg.Heartbeat, time.Second) }

func (s *stageSender) staleBefore() int64 { return s.now().Add(-s.staleAfter()).UnixNano() }

// heard records that replica inst of node is alive (a heartbeat, or a
// verdict through the queue group): it is created, or brought back into
// rotation, as needed.
func (s *stageSender) heard(inst, node string) *replicaState {
	now := s.now()
	s.mu.Lock()
	rs := s.replicas[inst]
	joined, back := rs == nil, rs != nil && rs.out.Load()
	if joined {
		rs = &replicaState{inst: inst, node: node, subject: s.n.directSubject(s.stage, inst)}
		rs.rot.Store(newRotation())
		s.replicas[inst] = rs
	}
	if back {
		rs.rot.Store(newRotation())
		rs.out.Store(false)
	}
	rs.seen.Store(now.UnixNano())
	rs.dead.Store(false)
	s.mu.Unlock()
	switch {
	case joined:
		s.warn(&s.warns.joined, "remote: replica joined", "replica", node, "instance", inst)
	case back:
		s.warn(&s.warns.joined, "remote: replica answering again: back in rotation", "replica", node, "instance", inst)
	}
	return rs
}

// answered records a verdict from replica v.inst (rs: the one the
// request went to, nil for the queue group) and returns its state, or
// nil if the sender has not heard its heartbeat yet (its node name comes
// with it).
func (s *stageSender) answered(rs *replicaState, v *verdict) *replicaState {
	if rs == nil || rs.inst != v.inst {
		s.mu.Lock()
		rs = s.replicas[v.inst]
		s.mu.Unlock()
		if rs == nil {
			return nil
		}
	}
	if rs.out.Load() {
		rs = s.heard(rs.inst, rs.node)
	} else {
		rs.seen.Store(s.now().UnixNano())
	}
	rs.len.Store(int64(v.len))
	return rs
}

// watch sweeps the replicas every heartbeat until the node closes (the
// only caller of sweep, which owns lastSweep).
func (s *stageSender) watch() {
	defer s.n.wg.Done()
	t := time.NewTicker(s.n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sweep()
			s.findSource()
		case <-s.n.ctx.Done():
			return
		}
	}
}

// sweep takes out of rotation the replicas that went silent or away,
// ending the requests that wait for them, and forgets the ones out for
// long.
func (s *stageSender) sweep() {
	now := s.now()
	last := s.lastSweep
	s.lastSweep = now
	if !last.IsZero() && now.Sub(last) > s.staleAfter()/2 {
		// This process was paused (SIGSTOP) or starved: the silence it
		// sees is its own. The heartbeats that came meanwhile are
		// handled before the next sweep.
		return
	}
	if s.n.cutOff() {
		// Cut off from NATS (a restarting server): no heartbeat reaches
		// this node, the silence is its own.
		s.wasCut = true
		return
	}
	if s.wasCut {
		// Back: every replica in rotation gets a staleness period from
		// now to be heard again (one that left meanwhile finds no
		// responders on its subject).
		s.wasCut = false
		s.mu.Lock()
		for _, rs := range s.replicas {
			if !rs.out.Load() {
				rs.seen.Store(now.UnixNano())
			}
		}
		s.mu.Unlock()
		return
	}
	stale, forget := now.Add(-s.staleAfter()).UnixNano(), now.Add(-forgetAfter).UnixNano()
	type gone struct {
		rs     *replicaState
		rot    *rotation
		dead   bool
		waited int64
	}
	var out []gone
	live := 0
	s.mu.Lock()
	for inst, rs := range s.replicas {
		if rs.out.Load() {
			if rs.seen.Load() < forget {
				delete(s.replicas, inst) // its combiner, if it is a home, goes once idle (pruneHomes)
			}
			continue
		}
		dead := rs.dead.Load()
		if !dead && rs.seen.Load() >= stale {
			live++
			continue
		}
		rs.out.Store(true)
		out = append(out, gone{rs: rs, rot: rs.rot.Load(), dead: dead, waited: rs.inflight.Load()})
	}
	s.mu.Unlock()
	// A sink this node never sent through (a stage it does not use, whose
	// replicas it hears all the same) stays quiet about departures.
	quiet := s.sent.Load() == 0
	for _, g := range out {
		if quiet {
			break
		}
		silence := time.Duration(now.UnixNano() - g.rs.seen.Load()).Round(time.Millisecond)
		switch {
		case g.dead:
			s.warn(&s.warns.left, "remote: replica left (no responders on its subject): out of rotation", "replica", g.rs.node, "instance", g.rs.inst)
		case g.waited > 0:
			s.warn(&s.warns.silent, "remote: replica not answering (requests waiting): out of rotation", "replica", g.rs.node,
				"instance", g.rs.inst, "silent", silence, "waiting", g.waited)
		default:
			s.warn(&s.warns.left, "remote: replica silent (no heartbeat: gone or hung): out of rotation", "replica", g.rs.node, "instance", g.rs.inst, "silent", silence)
		}
	}
	if len(out) > 0 && live == 0 && !quiet {
		s.warn(&s.warns.none, "remote: no replica of the stage left in rotation: its enqueues are rejected")
	}
	// Logged first, so the line is out before the callers see their
	// rejection.
	for _, g := range out {
		g.rot.cancel()
		if s.n.watcher != nil {
			s.n.watcher.Out(s.stage, g.rs.inst)
		}
	}
	s.pruneHomes(now)
}

// request sends msg to rs (nil: the stage's queue group or the fixed
// subject) and waits for one reply for per (up to per/16 more for a
// known replica: see sharedDeadline), or until rs is taken out of
// rotation (errOutOfRotation). A reply that does not come in time is
// nats.ErrTimeout.
func (s *stageSender) request(msg *nats.Msg, rs *replicaState, per time.Duration) (*nats.Msg, error) {
	if rs == nil {
		return s.n.nc.RequestMsg(msg, per)
	}
	rot := rs.rot.Load()
	if rot.ctx.Err() != nil {
		return nil, errOutOfRotation
	}
	rs.inflight.Add(1)
	defer rs.inflight.Add(-1)
	reply, err := s.n.nc.RequestMsgWithContext(rs.deadline(rot, per), msg)
	switch {
	case err == nil:
		return reply, nil
	case errors.Is(err, nats.ErrNoResponders):
		return nil, err // nobody took it, whatever became of the rotation meanwhile
	case rot.ctx.Err() != nil:
		return nil, errOutOfRotation
	case errors.Is(err, context.DeadlineExceeded):
		rs.timedOut.Store(s.now().UnixNano())
		return nil, nats.ErrTimeout
	}
	return nil, err
}

// noneInRotation is the rejection of an enqueue while every replica the
// sender knows is out of rotation.
func (s *stageSender) noneInRotation() error {
	s.warn(&s.warns.none, "remote: no replica of the stage in rotation: enqueue rejected")
	return s.reject(fmt.Sprintf("no replica of the stage in rotation (each stopped answering for %v or left)", s.staleAfter()))
}

// Replicas returns how many replicas of the stage are in rotation: heard
// from within the staleness bound and not gone.
func (s *stageSender) Replicas() int {
	n, _ := s.inRotation()
	return n
}

// inRotation returns how many replicas are in rotation and the sum of
// their queue lengths as last reported.
func (s *stageSender) inRotation() (replicas, queued int) {
	stale := s.staleBefore()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range s.replicas {
		if rs.inRotation(stale) {
			replicas++
			queued += int(rs.len.Load())
		}
	}
	return replicas, queued
}

// inRotation reports whether rs may be sent requests: not gone, not out
// of rotation, heard from since stale.
func (rs *replicaState) inRotation(stale int64) bool {
	return !rs.dead.Load() && !rs.out.Load() && rs.seen.Load() >= stale
}

// homeReplica returns the replica on instance home (nil for no home, or
// for a SinkRef's sender), whatever its state: a reply waits for its home
// rather than go elsewhere (see boundTrip); or, if the sender has not
// heard of it yet (its first heartbeat is still on its way), a stand-in
// for it, not kept.
func (s *stageSender) homeReplica(home string) *replicaState {
	if home == "" || s.fixed != "" {
		return nil
	}
	s.mu.Lock()
	rs := s.replicas[home]
	s.mu.Unlock()
	if rs == nil {
		rs = &replicaState{inst: home, subject: s.n.directSubject(s.stage, home)}
		rs.rot.Store(newRotation())
	}
	return rs
}

// from is the request's sending stage: the one stage of this node that
// enqueues on the sender's stage (traced edges), or "" if none or several
// do. The replicas count what they admit by it (Node.deliveredFrom), so
// that the receiving node's graph draws an edge from this stage.
func (s *stageSender) from() string {
	if p := s.source.Load(); p != nil {
		return *p
	}
	return ""
}

// findSource sets from from the manager's traced edges.
func (s *stageSender) findSource() {
	s.n.mu.Lock()
	m := s.n.m
	s.n.mu.Unlock()
	if m == nil {
		return
	}
	src := ""
	for _, e := range m.Edges() {
		if e.To != s.stage || e.From == "" {
			continue
		}
		if _, local := m.Stage(e.From); !local {
			continue
		}
		if src != "" && src != e.From {
			src = "" // several: nobody in particular
			break
		}
		src = e.From
	}
	if cur := s.source.Load(); cur == nil || *cur != src {
		s.source.Store(&src)
	}
}

// Delivered returns how many events replicas of this sender's stage (on
// other nodes) delivered to the stages this node hosts, by destination:
// the edges from the remote stage into this node's graph (the profiler
// draws them instead of edges from outside).
func (s *stageSender) Delivered() map[string]uint64 { return s.n.deliveredFrom(s.stage) }
