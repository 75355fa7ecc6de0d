package arashi

import "github.com/sandstorm-go/sandstorm/apps/haboob"

// DegraderOf exposes a request type's degrader to the tests (nil: none).
func (a *App) DegraderOf(k Kind) *haboob.Degrader {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.degraders[k]
}

var PageSizeAt, WithCountsAt = pageSize, withCounts
