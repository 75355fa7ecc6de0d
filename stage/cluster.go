package stage

import (
	"fmt"
	"slices"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// HostedOn reports whether the stage runs on the named node: it does if its
// `nodes:` list is empty (every node) or names node. Every stage is hosted
// on node "" (a process outside any cluster).
func (sc *StageConfig) HostedOn(node string) bool {
	return node == "" || len(sc.Nodes) == 0 || slices.Contains(sc.Nodes, node)
}

// validateNodes checks a stage's `nodes:` key.
func validateNodes(sc *StageConfig, n *yaml.Node, path string) error {
	for i, node := range sc.Nodes {
		if node == "" {
			return check(false, n, path, []string{"nodes"}, "empty node name at index %d", i)
		}
	}
	return nil
}

// remoteSinks holds the sinks of the stages this manager does not host
// (SetRemoteSink).
type remoteSinks struct {
	mu sync.RWMutex
	m  map[string]sink.Sink
}

// SetRemoteSink makes s the sink of the stage name, which this manager does
// not host: Context.Sink and RemoteSink return it (Context.Sink traces its
// enqueues as edges of the stage graph). Package remote calls it for every
// stage hosted on other nodes. It fails if the manager hosts a stage of
// that name.
func (m *Manager) SetRemoteSink(name string, s sink.Sink) error {
	if s == nil {
		return fmt.Errorf("%w: remote sink for %q is nil", ErrInvalidConfig, name)
	}
	if _, ok := m.Stage(name); ok {
		return fmt.Errorf("%w: %q is hosted here", ErrStageExists, name)
	}
	m.remotes.mu.Lock()
	defer m.remotes.mu.Unlock()
	if m.remotes.m == nil {
		m.remotes.m = map[string]sink.Sink{}
	}
	m.remotes.m[name] = s
	return nil
}

// RemoteSink returns the sink of a stage hosted on another node, set by
// SetRemoteSink.
func (m *Manager) RemoteSink(name string) (sink.Sink, bool) {
	m.remotes.mu.RLock()
	defer m.remotes.mu.RUnlock()
	s, ok := m.remotes.m[name]
	return s, ok
}

// remoteFrom returns the remote sink of stage to as seen from stage from,
// traced as an edge, or nil.
func (m *Manager) remoteFrom(from, to string) sink.Sink {
	s, ok := m.RemoteSink(to)
	if !ok {
		return nil
	}
	return &tracedRemote{Sink: s, edge: m.edgeCounter(from, to)}
}

// tracedRemote counts a remote sink's accepted events on the edge of the
// stage graph it stands for.
type tracedRemote struct {
	sink.Sink
	edge interface{ Add(uint64) uint64 }
}

func (t *tracedRemote) Enqueue(e sink.Event) error {
	err := t.Sink.Enqueue(e)
	if err == nil {
		t.edge.Add(1)
	}
	return err
}

func (t *tracedRemote) EnqueueMany(es []sink.Event) error {
	err := t.Sink.EnqueueMany(es)
	if err == nil {
		t.edge.Add(uint64(len(es)))
	}
	return err
}

func (t *tracedRemote) EnqueueLossy(e sink.Event) bool {
	ok := t.Sink.EnqueueLossy(e)
	if ok {
		t.edge.Add(1)
	}
	return ok
}

// Unwrap returns the remote sink itself.
func (t *tracedRemote) Unwrap() sink.Sink { return t.Sink }

func (t *tracedRemote) String() string { return fmt.Sprint(t.Sink) }

// SharedPredicates returns the predicate state the manager's stages share
// (group rates, session tables); package remote divides group rates among
// the nodes of a cluster through it.
func (m *Manager) SharedPredicates() *enqueuepred.Shared { return m.predicateShared() }
