package remote

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/stage"
)

// groupShares makes the group rates of a manager (JOBS §7.2.3, `{type:
// group}` predicates) cluster-wide: a group's configured rate is the
// total for the whole cluster, and each of the N live nodes whose stages
// use the group admits rate/N. Every node announces the groups it uses
// every heartbeat and recomputes its share from the announcements it has
// heard within the staleness bound.
//
// Accuracy: over any interval T the cluster admits at most R·T plus one
// bucket depth per node, except around a membership change: a node
// joining admits at the full rate R until it hears the others (one
// heartbeat) and the others keep R/N until they hear it, and a node
// leaving lowers the total to R·(N−1)/N until the others notice (three
// heartbeats, at least a second). The split is even, not by demand: a
// node with little traffic leaves its share unused.
type groupShares struct {
	n      *Node
	groups map[string]*share
	subs   []*nats.Subscription
}

type share struct {
	g     *enqueuepred.GroupRate
	total float64
	mu    sync.Mutex
	peers map[string]int64 // instance → last announcement, UnixNano
}

// shareGroups starts dividing m's group rates; it does nothing if m has
// none.
func (n *Node) shareGroups(m *stage.Manager) error {
	sh := m.SharedPredicates()
	names := sh.Groups()
	if len(names) == 0 {
		return nil
	}
	gs := &groupShares{n: n, groups: map[string]*share{}}
	for _, name := range names {
		g, err := sh.Group(name, enqueuepred.RateConfig{})
		if err != nil {
			return err
		}
		s := &share{g: g, total: g.Rate.Rate(), peers: map[string]int64{}}
		gs.groups[name] = s
		sub, err := n.nc.Subscribe(n.cfg.Prefix+".group."+name, func(msg *nats.Msg) {
			s.mu.Lock()
			s.peers[string(msg.Data)] = time.Now().UnixNano()
			s.mu.Unlock()
		})
		if err != nil {
			return err
		}
		gs.subs = append(gs.subs, sub)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		gs.run()
	}()
	return nil
}

func (gs *groupShares) run() {
	t := time.NewTicker(gs.n.cfg.Heartbeat)
	defer t.Stop()
	for {
		for name, s := range gs.groups {
			_ = gs.n.nc.Publish(gs.n.cfg.Prefix+".group."+name, []byte(gs.n.inst))
			s.update(gs.n.inst, time.Now().Add(-max(3*gs.n.cfg.Heartbeat, time.Second)).UnixNano())
		}
		select {
		case <-t.C:
		case <-gs.n.ctx.Done():
			for _, sub := range gs.subs {
				_ = sub.Unsubscribe()
			}
			return
		}
	}
}

// update sets this node's share from the live nodes heard from.
func (s *share) update(self string, stale int64) {
	s.mu.Lock()
	live := 1
	for inst, seen := range s.peers {
		switch {
		case inst == self:
		case seen < stale:
			delete(s.peers, inst)
		default:
			live++
		}
	}
	s.mu.Unlock()
	if want := s.total / float64(live); s.g.Rate.Rate() != want {
		s.g.SetRate(want)
	}
}

// GroupShare returns this node's share of a cluster-wide group rate, or
// false if the manager has no such group.
//
// In a cluster a group's configured rate R is the total: each of the N
// live nodes whose stages use the group admits R/N. Over any interval T
// the cluster admits at most R·T plus one bucket depth per node, except
// around a membership change: a joining node admits up to R until it
// hears the others (one heartbeat) while they keep R/N until they hear
// it, and a node that leaves lowers the total to R·(N−1)/N until the
// others notice (three heartbeats, at least a second). The split is even,
// not by demand: a node with little traffic leaves its share unused.
func GroupShare(m *stage.Manager, group string) (rate float64, ok bool) {
	for _, name := range m.SharedPredicates().Groups() {
		if name == group {
			g, err := m.SharedPredicates().Group(name, enqueuepred.RateConfig{})
			if err != nil {
				return 0, false
			}
			return g.Rate.Rate(), true
		}
	}
	return 0, false
}
