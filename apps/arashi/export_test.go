package arashi

import "github.com/sandstorm-go/sandstorm/enqueuepred"

// DegraderOf exposes a request type's degrader to the tests (nil: none).
func (a *App) DegraderOf(k Kind) *enqueuepred.Degrader {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.degraders[k]
}

var PageSizeAt, WithCountsAt = pageSize, withCounts

// Sessions exposes the session table to the tests.
func (a *App) NewSession(user int64, name string) uint64 { return a.newSession(user, name) }
func (a *App) EndSession(key string)                     { a.endSession(key) }
func (a *App) HasSession(key string) bool                { _, ok := a.session(key); return ok }
func (a *App) SessionOrder() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.order)
}
