package enqueuepred

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// GroupRate is a token bucket shared by every stage that names the same
// group (JOBS §7.2.3): the total rate admitted into all of them stays under
// the group's rate. Combine it with a stage's own Rate in NewAll to get JOBS's
// "least of the group and the specific regulator".
type GroupRate struct {
	*Rate
	group string
}

// Name implements sink.Namer.
func (g *GroupRate) Name() string { return "group:" + g.group }

// Group returns the group's name.
func (g *GroupRate) Group() string { return g.group }

// errGroupConflict is wrapped by the error for a group rate or session
// table declared twice with different parameters. It is an ErrBadConfig.
var errGroupConflict error = badConfig("enqueuepred: group rate declared with conflicting parameters")

// badConfig is an error with its own text that errors.Is finds to be
// ErrBadConfig.
type badConfig string

func (e badConfig) Error() string        { return string(e) }
func (e badConfig) Is(target error) bool { return target == ErrBadConfig }

// Shared holds state shared by the predicates of one stage manager, such as
// named group rates. The zero value is not usable: call NewShared.
type Shared struct {
	mu       sync.Mutex
	groups   map[string]*GroupRate
	cfgs     map[string]RateConfig
	sessions map[string]*SessionTable
}

// NewShared returns empty shared state.
func NewShared() *Shared {
	return &Shared{groups: map[string]*GroupRate{}, cfgs: map[string]RateConfig{}, sessions: map[string]*SessionTable{}}
}

// SessionTable returns the session table called name, creating it on
// first use with window and maxSessions (0: the defaults, 10 s and
// 100000). Every call for one table must give the same values (a zero
// standing for the default), whatever the order of the calls; other values
// are an error wrapping ErrBadConfig.
func (s *Shared) SessionTable(name string, window time.Duration, maxSessions int) (*SessionTable, error) {
	if name == "" {
		return nil, errors.New("enqueuepred: session table needs a name")
	}
	want := newSessionTable(window, maxSessions)
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.sessions[name]; ok {
		t.mu.Lock()
		w, m := t.window, t.max
		t.mu.Unlock()
		if window, maxSessions = want.window, want.max; window != w || maxSessions != m {
			return nil, fmt.Errorf("%w: session table %q has window %v maxSessions %d, not window %v maxSessions %d",
				errGroupConflict, name, w, m, window, maxSessions)
		}
		return t, nil
	}
	s.sessions[name] = want
	return want, nil
}

// Group returns the group rate called name, creating it with c on first
// use. A later call may repeat the same Rate and Depth or leave them zero;
// other values are an error wrapping ErrBadConfig (change a group's rate
// with SetRate instead).
func (s *Shared) Group(name string, c RateConfig) (*GroupRate, error) {
	if name == "" {
		return nil, errors.New("enqueuepred: group rate needs a name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.groups[name]; ok {
		old := s.cfgs[name]
		if (c.Rate != 0 && c.Rate != old.Rate) || (c.Depth != 0 && c.Depth != old.Depth) {
			return nil, fmt.Errorf("%w: group %q has rate %v depth %d, not rate %v depth %d",
				errGroupConflict, name, old.Rate, old.Depth, c.Rate, c.Depth)
		}
		return g, nil
	}
	g := &GroupRate{Rate: NewRate(c), group: name}
	s.groups[name] = g
	s.cfgs[name] = c
	return g, nil
}

// Groups returns the names of the groups declared so far.
func (s *Shared) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.groups))
	for name := range s.groups {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
