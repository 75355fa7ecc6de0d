package stage

import (
	"fmt"
	"slices"
	"time"
)

// supNode is a supervisor: a stage's own or a group. Owned with the tree
// (see supTree); cfg and name never change after newSupNode.
type supNode struct {
	name     string
	cfg      SupervisorConfig // defaults applied
	own      *Stage           // set for a stage's own supervisor
	parent   *supNode
	children []supChild
	history  []time.Time // restarts within the period
	loop     int         // restarts of the current crash loop (restartDelay)
	failed   bool        // a root that gave up and failed its stages
}

func newSupNode(name string, cfg SupervisorConfig) *supNode {
	return &supNode{name: name, cfg: cfg.withDefaults()}
}

// root returns the root of n's tree.
func (n *supNode) root() *supNode {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// supChild is a stage or a supervisor.
type supChild struct {
	st   *Stage
	node *supNode
}

func (c supChild) is(o supChild) bool { return c.st == o.st && c.node == o.node }

// stages appends the stages under c, depth first, in start order.
func (c supChild) stages(out []*Stage) []*Stage {
	if c.st != nil {
		return append(out, c.st)
	}
	for _, cc := range c.node.children {
		out = cc.stages(out)
	}
	return out
}

func (c supChild) contains(s *Stage) bool {
	if c.st != nil {
		return c.st == s
	}
	for _, cc := range c.node.children {
		if cc.contains(s) {
			return true
		}
	}
	return false
}

// reset forgets the restart history of every supervisor under c: a
// restarted supervisor starts afresh.
func (c supChild) reset() {
	if c.node == nil {
		return
	}
	c.node.history = c.node.history[:0]
	c.node.loop = 0
	for _, cc := range c.node.children {
		cc.reset()
	}
}

// supTree is the manager's supervisors and who supervises each stage,
// part of supState: its owner is supState's (see supervise.go). Its
// methods are plain data operations: they call into no other layer.
type supTree struct {
	nodes    map[string]*supNode
	parentOf map[*Stage]*supNode // each supervised stage's supervisor
}

// setParent makes n the supervisor of s, and publishes n's RestartOn to
// s's failing batches (Stage.restartOn).
func (t *supTree) setParent(s *Stage, n *supNode) {
	t.parentOf[s] = n
	s.restartOn.Store(&n.cfg.RestartOn)
}

// addOwn gives s its own supervisor.
func (t *supTree) addOwn(s *Stage, cfg SupervisorConfig) error {
	if _, dup := t.nodes[s.name]; dup {
		return fmt.Errorf("%w: stage %q: a supervisor of that name exists", ErrSupervisor, s.name)
	}
	n := newSupNode(s.name, cfg)
	n.own, n.children = s, []supChild{{st: s}}
	t.nodes[s.name] = n
	t.setParent(s, n)
	return nil
}

// group makes the group name over cfg.Children; stages are the children
// that name stages, looked up by the caller.
func (t *supTree) group(name string, cfg SupervisorConfig, stages map[string]*Stage) error {
	if _, dup := t.nodes[name]; dup {
		return fmt.Errorf("%w: supervisor %q defined twice", ErrSupervisor, name)
	}
	node := newSupNode(name, cfg)
	seen := map[string]bool{}
	for _, cn := range cfg.Children {
		if seen[cn] {
			return fmt.Errorf("%w: supervisor %q: child %q listed twice", ErrSupervisor, name, cn)
		}
		seen[cn] = true
		var c supChild
		if st := stages[cn]; st != nil {
			switch p := t.parentOf[st]; {
			case p != nil && p.own == st:
				c.node = p
			case p != nil:
				return fmt.Errorf("%w: supervisor %q: stage %q is already supervised by %q", ErrSupervisor, name, cn, p.name)
			case st.cfg.Factory == nil:
				return fmt.Errorf("%w: supervisor %q: stage %q: %w", ErrSupervisor, name, cn, errNoFactory)
			default:
				c.st = st
			}
		} else if n := t.nodes[cn]; n != nil && n.own == nil {
			c.node = n
		} else {
			return fmt.Errorf("%w: supervisor %q: no stage or supervisor %q", ErrSupervisor, name, cn)
		}
		if c.node != nil && c.node.parent != nil {
			return fmt.Errorf("%w: supervisor %q: %q is already supervised by %q", ErrSupervisor, name, cn, c.node.parent.name)
		}
		node.children = append(node.children, c)
	}
	for _, c := range node.children {
		if c.st != nil {
			t.setParent(c.st, node)
		} else {
			c.node.parent = node
		}
	}
	t.nodes[name] = node
	return nil
}

// remove takes a destroyed stage out of the tree, with its own supervisor.
func (t *supTree) remove(s *Stage) {
	s.restartOn.Store(nil)
	p := t.parentOf[s]
	delete(t.parentOf, s)
	if p == nil {
		return
	}
	p.children = slices.DeleteFunc(p.children, func(c supChild) bool { return c.st == s })
	if p.own == s {
		delete(t.nodes, p.name)
		if gp := p.parent; gp != nil {
			gp.children = slices.DeleteFunc(gp.children, func(c supChild) bool { return c.node == p })
		}
	}
}

func (t *supTree) names() []string {
	names := make([]string, 0, len(t.nodes))
	for n := range t.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// affected returns the children of node to restart when child failed, or
// nil if child is no longer there.
func affected(node *supNode, child supChild) []supChild {
	i := slices.IndexFunc(node.children, child.is)
	if i < 0 {
		return nil
	}
	switch node.cfg.Strategy {
	case OneForAll:
		return slices.Clone(node.children)
	case RestForOne:
		return slices.Clone(node.children[i:])
	}
	return []supChild{child}
}
