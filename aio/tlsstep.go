package aio

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// This file runs a handshake in steps (DESIGN §10). crypto/tls's
// Handshake is one blocking call, so it runs on a goroutine of its own, a
// coroutine (iter.Pull) that computes only while a worker of the handshake
// stage runs it: the worker switches to it directly, on its own thread,
// without the scheduler (no wake-up of another thread, no run queue), and
// it switches back when crypto/tls reads and no ciphertext is buffered.
// The worker then goes back to the pool; when the event loop has fed a
// record that can move the handshake on, the next step is queued on the
// stage (admission control again), and the worker that takes it switches
// to the coroutine again. A parked handshake costs its goroutine's stack
// and its connection's buffers, never a worker; a connection still
// sending its ClientHello costs no goroutine at all (the event loop
// buffers it, tlsconn.go).

// errHandshakeTimeout closes a connection whose handshake did not end
// within TLSConfig.HandshakeTimeout.
var errHandshakeTimeout = errors.New("aio: TLS handshake timed out")

// handshakeTurns is what a handshake's transport asks of its session.
type handshakeTurns interface {
	pause()  // give the worker back and wait for the next step's turn
	resume() // input that moves the handshake on arrived: queue the next step
	give()   // go on without a worker (the transport closed: Read only fails)
}

// handshakeSteps is a session's handshake state.
type handshakeSteps struct {
	hs   *Handshakes
	done func(error) // the outcome, on the handshake goroutine
	// runner is the coroutine running the handshake (tlsrunner.go), from
	// the first step until the handshake ends (finished). Whoever runs a
	// step holds stepMu: a step queued while the coroutine is still on
	// its way to pausing (it flushed its flight and the peer answered
	// already) waits for it instead of switching to a running coroutine.
	runner   *handshakeRunner
	finished bool
	stepMu   sync.Mutex
	started  atomic.Bool // the first step ran
	// shortFinish: a server that asks for no client certificate. Once its
	// TLS 1.3 flight is out (encrypted records in it), all that is left
	// is to check the client's Finished, a MAC over one record, as cheap
	// as decrypting a record: finishInline is then set, and the event
	// loop that fed that record runs the last step itself (no queueing,
	// no worker to wake, no wake-up of the loop to announce).
	shortFinish  bool
	finishInline atomic.Bool
	// queued is set while a later step waits on the stage's queue; a
	// worker taking it or the connection's end (release) clears it, and
	// whoever does hands the parked goroutine its turn, so a step the
	// stage never runs (it shut down) does not leave the goroutine parked.
	queued  atomic.Bool
	settled atomic.Bool // the outcome is counted
	// completed is set when crypto/tls's handshake returned without
	// error, before its last flight leaves: a peer that closes as soon
	// as it has that flight (a TLS 1.2 client's handshake ends with it)
	// closed after a completed handshake, which run counts, not ended.
	completed atomic.Bool
	deadline  int64 // sink.Nanotime by which it must end (0: none)
	// stepOnLoop is set while the event loop runs the last step itself
	// (resume): the handshake's end is announced when it returns.
	stepOnLoop bool
	// flightQueued is set once a flight went (partly) through the
	// outbox: later flights follow it there, in order (tlsflight.go).
	flightQueued bool
	// flightWritten is set when the socket took the whole flight being
	// flushed: its buffer (from the cipher pools) goes back at once.
	flightWritten bool
	// submitted is set by the event loop when the first step is queued.
	submitted bool
	// announce hands the established connection to the application; the
	// handshake goroutine sets announcing and the event loop runs it
	// (announceOnLoop).
	announce   func()
	announcing atomic.Bool
}

func newHandshakeSteps(server bool, cfg *tls.Config) handshakeSteps {
	return handshakeSteps{shortFinish: server && cfg.ClientAuth == tls.NoClientCert && cfg.GetConfigForClient == nil}
}

// step runs the handshake until it waits for the peer or ends (a worker
// of the handshake stage).
func (s *tlsSession) step() {
	if s.started.CompareAndSwap(false, true) {
		s.stepMu.Lock()
		s.runner = s.hs.runners.get(s)
		s.stepMu.Unlock()
	} else if !s.queued.CompareAndSwap(true, false) {
		return // the connection ended first and released the goroutine
	}
	s.runStep()
}

// runStep switches to the handshake coroutine until it pauses or ends;
// once it ended, the runner goes back to the stage's pool.
func (s *tlsSession) runStep() {
	s.stepMu.Lock()
	defer s.stepMu.Unlock()
	r := s.runner
	if r == nil {
		return // ended already
	}
	r.next()
	if s.finished {
		s.runner = nil
		s.hs.runners.put(r)
	}
}

// release lets a parked handshake goroutine whose next step is still
// queued go on without a worker (its transport is closed: it fails and
// ends).
func (s *tlsSession) release() {
	if s.queued.CompareAndSwap(true, false) {
		s.give()
	}
}

// run is the handshake goroutine. Its context has no Done channel, so
// crypto/tls starts no goroutine to watch it: the deadline is the
// connection's timer, which closes the transport.
func (s *tlsSession) run() {
	err := s.conn.HandshakeContext(context.Background())
	s.completed.Store(err == nil)
	if ferr := s.flushHandshake(); err == nil && ferr != nil {
		err = ferr
	}
	if err == nil {
		s.tr.SetBlocking(false)
		s.fresh.Store(true)
		s.ok.Store(true)
	}
	s.settle(err)
	if s.done != nil {
		s.done(err)
	}
}

// pause ends the step (the coroutine): the worker that ran it goes back
// to the pool, and pause returns when another one runs the next step.
func (s *tlsSession) pause() {
	if err := s.flushHandshake(); err != nil {
		_ = s.tr.Close() // the connection is gone: the handshake ends
	}
	s.runner.yield(struct{}{})
}

// flushHandshake sends what the step wrote, in one write (crypto/tls
// flushes a flight in several: the server's first flight and its session
// tickets, for one).
func (s *tlsSession) flushHandshake() error {
	if len(s.hsOut) == 0 {
		return nil
	}
	b := s.hsOut
	s.hsOut = nil
	if s.shortFinish && hasRecordOfType(b, recordTypeApplicationData) {
		s.finishInline.Store(true)
	}
	s.flightWritten = false
	err := s.raw(b)
	if s.flightWritten {
		cipherBufStats.flights.Add(1)
		putCipherBuf(b) // the socket took it all: nothing refers to it
	}
	return err
}

// recordTypeApplicationData is the content type of TLS 1.3's encrypted
// records: in a server's first flight, only TLS 1.3 has any (a TLS 1.2
// server's flight, or a TLS 1.3 HelloRetryRequest, is handshake and
// change_cipher_spec records in the clear).
const recordTypeApplicationData = 23

// hasRecordOfType reports whether the records in b include one of type t.
func hasRecordOfType(b []byte, t byte) bool {
	for len(b) >= recordHeaderLen {
		if b[0] == t {
			return true
		}
		n := recordHeaderLen + (int(b[3])<<8 | int(b[4]))
		if n > len(b) {
			return false
		}
		b = b[n:]
	}
	return false
}

// give lets the parked coroutine go on without a worker (its transport
// is closed: all it does is fail and end), on a goroutine of its own, as
// the caller may be the event loop or hold a lock the ending takes.
func (s *tlsSession) give() { go s.runStep() }

// NonRejectable makes a handshake's later steps pass the stage's queue
// threshold: a handshake admitted at its first step runs to its end, so a
// flood is refused at the door and not halfway (when a TLS 1.3 client
// already believes the handshake is done). Later steps queued at once are
// at most one per handshake in progress.
func (s *tlsSession) NonRejectable() bool { return s.started.Load() }

func (s *tlsSession) resume() {
	if s.finishInline.Load() {
		// The client's Finished: checked here (see shortFinish), on the
		// event loop, which then announces the connection itself.
		s.stepOnLoop = true
		s.runStep()
		s.stepOnLoop = false
		return
	}
	s.queued.Store(true)
	if err := s.hs.enqueue(s); err != nil {
		// Refused (the stage closed, or a predicate refuses even later
		// steps): the handshake ends, counted.
		s.settle(err)
		_ = s.tr.Close()
		s.release()
		return
	}
	if s.tr.isClosed() {
		s.release() // the connection ended while the step was queued
	}
}

// settle counts the handshake's outcome, once; it reports whether this
// call counted it.
func (s *tlsSession) settle(err error) bool {
	if s.hs == nil || !s.settled.CompareAndSwap(false, true) {
		return false
	}
	if err == nil {
		s.hs.counter.countDone(s.state())
	} else {
		s.hs.counter.countFailure(err)
	}
	return true
}

// expire ends a handshake that is still in progress: counted as a
// timeout, its goroutine (if any) released. It reports false if the
// handshake had already ended.
func (s *tlsSession) expire() bool {
	if s.ok.Load() || s.completed.Load() || !s.settle(errHandshakeTimeout) {
		return false
	}
	_ = s.tr.Close()
	s.release()
	return true
}

// ended is told that the connection closed: an established session reads
// what is left, a handshake in progress ends (counted: the peer left). A
// handshake that completed while its last flight was leaving is counted
// by run: completed if the flight left, failed if it could not.
func (s *tlsSession) ended() {
	if s.ok.Load() {
		s.tr.FeedEOF()
		return
	}
	if !s.completed.Load() {
		s.settle(io.EOF)
	}
	_ = s.tr.Close()
	s.release()
}
