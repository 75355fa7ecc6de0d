package arashi

import "github.com/sandstorm-go/sandstorm/enqueuepred"

// DegraderOf exposes a request type's degrader to the tests (nil: none).
func (a *App) DegraderOf(k Kind) *enqueuepred.Degrader {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.degraders[k]
}

var PageSizeAt, WithCountsAt = pageSize, withCounts
