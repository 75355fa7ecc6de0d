package aio

import (
	"iter"
	"sync"
)

// handshakeRunner is a coroutine that runs handshakes one after another.
// crypto/tls needs a deep stack (tens of KB): a new goroutine per
// handshake grows its stack from 2 KB by copying it several times, which
// was 4 % of a handshake's CPU. A runner keeps its grown stack for the
// next handshake; the handshake stage keeps a bounded set of idle ones.
type handshakeRunner struct {
	next  func() (struct{}, bool) // run the session until it pauses or ends
	stop  func()
	yield func(struct{}) bool // inside the coroutine: switch back
	s     *tlsSession         // the session it runs (nil while idle)
}

func newHandshakeRunner() *handshakeRunner {
	r := &handshakeRunner{}
	r.next, r.stop = iter.Pull(func(yield func(struct{}) bool) {
		r.yield = yield
		for {
			s := r.s
			s.run()
			s.finished = true
			if !yield(struct{}{}) {
				return // stopped while idle
			}
		}
	})
	return r
}

// runnerPool holds idle runners, at most max.
type runnerPool struct {
	mu   sync.Mutex
	idle []*handshakeRunner
	max  int
}

// get returns an idle runner set to run s, or a new one.
func (p *runnerPool) get(s *tlsSession) *handshakeRunner {
	p.mu.Lock()
	var r *handshakeRunner
	if n := len(p.idle); n > 0 {
		r, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if r == nil {
		r = newHandshakeRunner()
	}
	r.s = s
	return r
}

// put keeps r, whose handshake ended, for the next one, or stops it if
// enough are idle.
func (p *runnerPool) put(r *handshakeRunner) {
	r.s = nil
	p.mu.Lock()
	if len(p.idle) < p.max {
		p.idle = append(p.idle, r)
		r = nil
	}
	p.mu.Unlock()
	if r != nil {
		r.stop()
	}
}

// close stops every idle runner (the handshake stage ends).
func (p *runnerPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.max = nil, 0
	p.mu.Unlock()
	for _, r := range idle {
		r.stop()
	}
}
