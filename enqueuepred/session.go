package enqueuepred

import (
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// SessionConfig configures NewSession's predicate. Zero fields take defaults.
type SessionConfig struct {
	// Window is how long a decision holds for a session. An admitted
	// session stays admitted while it keeps sending within Window of its
	// last request; a rejected one is rejected for Window. Default 10s.
	Window time.Duration
	// MaxSessions bounds the remembered decisions; when full, expired ones
	// are swept and, if still full, new sessions are decided per request.
	// Default 100000.
	MaxSessions int
	Now         func() time.Time // nil: time.Now
	// Table, if set, holds the decisions instead of a table of the
	// predicate's own: session predicates of several stages sharing one
	// table treat a session the same in every stage (Window and
	// MaxSessions are then the table's).
	Table *SessionTable
}

// SessionTable holds the admission decisions of sessions. Shared by the
// session predicates of several stages (Shared.SessionTable, YAML
// `table:`), it makes a session's admission consistent across the stage
// graph: a session admitted at the front door is admitted by every stage
// behind it for the window, and one turned away is turned away everywhere.
type SessionTable struct {
	mu       sync.Mutex
	window   time.Duration
	max      int
	sessions map[string]sessionEntry
}

// newSessionTable returns an empty table; zero values take the defaults
// of SessionConfig (10 s, 100000 sessions).
func newSessionTable(window time.Duration, maxSessions int) *SessionTable {
	if window <= 0 {
		window = 10 * time.Second
	}
	if maxSessions <= 0 {
		maxSessions = 100000
	}
	return &SessionTable{window: window, max: maxSessions, sessions: map[string]sessionEntry{}}
}

// Forget drops the decision for a session (for example at logout).
func (t *SessionTable) Forget(id string) {
	t.mu.Lock()
	delete(t.sessions, id)
	t.mu.Unlock()
}

func (t *SessionTable) sweepLocked(now int64) {
	for id, ent := range t.sessions {
		if now >= ent.until {
			delete(t.sessions, id)
		}
	}
}

// session makes admission session-consistent (Whirlwind §IV, after
// Cherkasova & Phaal's session-based admission control): the first request
// of a session (its principal's ID) is decided by the inner predicate, and
// later requests of that session get the same answer, so a user is either
// served a whole page or told at once that the site is busy. Requests
// admitted on the strength of the session are charged to the inner
// predicate. Events without a principal ID are decided by the inner
// predicate alone.
type session struct {
	counts
	inner sink.Predicate
	kids  []sink.Predicate // inner, for Children
	now   func() time.Time

	t *SessionTable
}

type sessionEntry struct {
	admit bool
	until int64 // UnixNano
}

var _ sink.Composite = (*session)(nil)

// NewSession makes inner's decisions session-consistent (Whirlwind §IV,
// YAML `session`): the first request of a session (its principal's ID) is
// decided by inner, and later requests of that session within the window
// get the same answer, so a user is served a whole page or told at once
// that the site is busy. Events without a principal ID are decided by
// inner alone.
func NewSession(inner sink.Predicate, c SessionConfig) sink.Predicate { return newSession(inner, c) }

// newSession is NewSession, returning the concrete type.
func newSession(inner sink.Predicate, c SessionConfig) *session {
	t := c.Table
	if t == nil {
		t = newSessionTable(c.Window, c.MaxSessions)
	}
	return &session{inner: inner, kids: []sink.Predicate{inner}, now: nowFunc(c.Now), t: t}
}

// Table returns the table holding the predicate's session decisions.
func (s *session) Table() *SessionTable { return s.t }

// Name implements sink.Namer.
func (s *session) Name() string { return "session" }

// Children implements sink.Composite: the inner predicate.
func (s *session) Children() []sink.Predicate { return s.kids }

// Accept implements sink.Predicate.
func (s *session) Accept(e sink.Event) bool {
	if sink.IsNonRejectable(e) {
		s.charge(e)
		return true
	}
	pr, ok := PrincipalOf(e)
	if !ok || pr.ID == "" {
		if s.inner.Accept(e) {
			return s.yes()
		}
		return s.no()
	}
	now := s.now().UnixNano()
	t := s.t
	t.mu.Lock()
	window := int64(t.window)
	if ent, ok := t.sessions[pr.ID]; ok && now < ent.until {
		if ent.admit {
			ent.until = now + window
			t.sessions[pr.ID] = ent
		}
		t.mu.Unlock()
		if ent.admit {
			charge(s.inner, e)
			return s.yes()
		}
		return s.no()
	}
	t.mu.Unlock()
	admit := s.inner.Accept(e)
	t.mu.Lock()
	if _, ok := t.sessions[pr.ID]; !ok && len(t.sessions) >= t.max {
		t.sweepLocked(now)
	}
	if _, ok := t.sessions[pr.ID]; ok || len(t.sessions) < t.max {
		t.sessions[pr.ID] = sessionEntry{admit: admit, until: now + window}
	}
	t.mu.Unlock()
	if admit {
		return s.yes()
	}
	return s.no()
}

// Forget drops the decision for a session (for example at logout), in
// every stage sharing the predicate's table.
func (s *session) Forget(id string) { s.t.Forget(id) }

// charge implements charger.
func (s *session) charge(e sink.Event) {
	charge(s.inner, e)
	s.accepted.Add(1)
}

// SetWindow changes the decision window while traffic flows (for every
// stage sharing the predicate's table).
func (s *session) SetWindow(d time.Duration) {
	if d <= 0 {
		return
	}
	s.t.mu.Lock()
	s.t.window = d
	s.t.mu.Unlock()
}

// Inspect implements Inspector.
func (s *session) Inspect(report func(string, float64)) {
	now := s.now().UnixNano()
	s.t.mu.Lock()
	var admitted, rejected int
	for _, ent := range s.t.sessions {
		if now < ent.until {
			if ent.admit {
				admitted++
			} else {
				rejected++
			}
		}
	}
	s.t.mu.Unlock()
	report("sessions_admitted", float64(admitted))
	report("sessions_rejected", float64(rejected))
	s.inspect(report)
	inspect(s.inner, prefixed("0."+sink.PredicateName(s.inner)+".", report))
}
