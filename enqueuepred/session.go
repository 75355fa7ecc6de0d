package enqueuepred

import (
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// SessionConfig configures a Session predicate. Zero fields take defaults.
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
}

// Session makes admission session-consistent (Whirlwind §IV, after
// Cherkasova & Phaal's session-based admission control): the first request
// of a session (its principal's ID) is decided by the inner predicate, and
// later requests of that session get the same answer, so a user is either
// served a whole page or told at once that the site is busy. Requests
// admitted on the strength of the session are charged to the inner
// predicate. Events without a principal ID are decided by the inner
// predicate alone.
type Session struct {
	counts
	inner sink.Predicate
	now   func() time.Time

	mu       sync.Mutex
	cfg      SessionConfig
	sessions map[string]sessionEntry
}

type sessionEntry struct {
	admit bool
	until int64 // UnixNano
}

var (
	_ sink.Completer = (*Session)(nil)
	_ Composite      = (*Session)(nil)
)

// NewSession wraps inner.
func NewSession(inner sink.Predicate, c SessionConfig) *Session {
	if c.Window <= 0 {
		c.Window = 10 * time.Second
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 100000
	}
	return &Session{inner: inner, now: nowFunc(c.Now), cfg: c, sessions: map[string]sessionEntry{}}
}

// Name implements sink.Namer.
func (s *Session) Name() string { return "session" }

// Children implements Composite.
func (s *Session) Children() []sink.Predicate { return []sink.Predicate{s.inner} }

// Accept implements sink.Predicate.
func (s *Session) Accept(e sink.Event) bool {
	if IsNonRejectable(e) {
		s.Charge(e)
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
	window := int64(s.cfg.Window)
	s.mu.Lock()
	if ent, ok := s.sessions[pr.ID]; ok && now < ent.until {
		if ent.admit {
			ent.until = now + window
			s.sessions[pr.ID] = ent
		}
		s.mu.Unlock()
		if ent.admit {
			Charge(s.inner, e)
			return s.yes()
		}
		return s.no()
	}
	s.mu.Unlock()
	admit := s.inner.Accept(e)
	s.mu.Lock()
	if _, ok := s.sessions[pr.ID]; !ok && len(s.sessions) >= s.cfg.MaxSessions {
		s.sweepLocked(now)
	}
	if _, ok := s.sessions[pr.ID]; ok || len(s.sessions) < s.cfg.MaxSessions {
		s.sessions[pr.ID] = sessionEntry{admit: admit, until: now + window}
	}
	s.mu.Unlock()
	if admit {
		return s.yes()
	}
	return s.no()
}

func (s *Session) sweepLocked(now int64) {
	for id, ent := range s.sessions {
		if now >= ent.until {
			delete(s.sessions, id)
		}
	}
}

// Forget drops the decision for a session (for example at logout).
func (s *Session) Forget(id string) {
	s.mu.Lock()
	delete(s.sessions, id)
	s.mu.Unlock()
}

// Charge implements Charger.
func (s *Session) Charge(e sink.Event) {
	Charge(s.inner, e)
	s.accepted.Add(1)
}

// Done implements sink.Completer.
func (s *Session) Done(e sink.Event, queued, service time.Duration) {
	sink.Done(s.inner, e, queued, service)
}

// Cancel implements sink.Canceler.
func (s *Session) Cancel(e sink.Event) { sink.Cancel(s.inner, e) }

// Bind implements sink.Binder.
func (s *Session) Bind(q sink.Sink) {
	if b, ok := s.inner.(sink.Binder); ok {
		b.Bind(q)
	}
}

// SetWindow changes the decision window while traffic flows.
func (s *Session) SetWindow(d time.Duration) {
	if d <= 0 {
		return
	}
	s.mu.Lock()
	s.cfg.Window = d
	s.mu.Unlock()
}

// Inspect implements Inspector.
func (s *Session) Inspect(report func(string, float64)) {
	now := s.now().UnixNano()
	s.mu.Lock()
	var admitted, rejected int
	for _, ent := range s.sessions {
		if now < ent.until {
			if ent.admit {
				admitted++
			} else {
				rejected++
			}
		}
	}
	s.mu.Unlock()
	report("sessions_admitted", float64(admitted))
	report("sessions_rejected", float64(rejected))
	s.inspect(report)
	Inspect(s.inner, prefixed("0."+sink.PredicateName(s.inner)+".", report))
}
