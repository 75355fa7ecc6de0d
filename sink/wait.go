package sink

import (
	"context"
	"errors"
	"time"
)

// WaitPolicy bounds how EnqueueWait retries. The zero value retries with
// back-off from 50µs up to 10ms between attempts until ctx ends.
type WaitPolicy struct {
	MinBackoff time.Duration // 0 → 50µs
	MaxBackoff time.Duration // 0 → 10ms
}

// SpaceNotifier is implemented by sinks that can tell a waiting producer
// when room may have appeared (Queue does).
type SpaceNotifier interface {
	SpaceSignal() (ch <-chan struct{}, release func())
}

// Backlogger is implemented by sinks that ask producers willing to wait to
// hold back although they would accept: an unbounded Queue holding more
// than a few thousand events (Queue.Backlogged).
type Backlogger interface {
	Backlogged() bool
}

// EnqueueWait enqueues e on s, waiting while s rejects it, until it is
// accepted, s is closed, or ctx ends. It is the back-pressure counterpart of
// Enqueue for producers that would rather wait than shed load. On a
// Backlogger it first waits while the sink is backlogged, so that a
// producer feeding an unbounded queue is paced like one feeding a bounded
// queue or a buffered channel. It does not spin: on a SpaceNotifier it
// sleeps until an event leaves the queue or the back-off elapses; on other
// sinks it backs off exponentially.
//
// It returns nil, an error wrapping ErrClosed, or ctx.Err() joined with the
// last rejection.
func EnqueueWait(ctx context.Context, s Sink, e Event) error {
	return WaitPolicy{}.EnqueueWait(ctx, s, e)
}

// EnqueueWait is EnqueueWait with this policy.
func (p WaitPolicy) EnqueueWait(ctx context.Context, s Sink, e Event) error {
	if !backlogged(s) {
		if err := s.Enqueue(e); !retryable(err) { // the common case: no waiting
			return err
		}
	}
	return p.wait(ctx, s, func() error { return s.Enqueue(e) })
}

// EnqueueManyWait is EnqueueWait for an all-or-nothing batch.
func (p WaitPolicy) EnqueueManyWait(ctx context.Context, s Sink, es []Event) error {
	if !backlogged(s) {
		if err := s.EnqueueMany(es); !retryable(err) {
			return err
		}
	}
	return p.wait(ctx, s, func() error { return s.EnqueueMany(es) })
}

// errBacklogged stands for the refusal of a backlogged sink in wait.
var errBacklogged = &RejectError{Reason: "backlogged"}

func backlogged(s Sink) bool {
	b, ok := s.(Backlogger)
	return ok && b.Backlogged()
}

// retryable reports whether err is a rejection worth waiting out (not
// acceptance, closure or another failure).
func retryable(err error) bool {
	return err != nil && !errors.Is(err, ErrClosed) && errors.Is(err, ErrRejected)
}

// wait retries try, which has just been refused (or not tried: s was
// backlogged), until it succeeds, fails for good or ctx ends. It registers for space before the next try, so a
// wake-up between the refusal and the sleep is not missed.
func (p WaitPolicy) wait(ctx context.Context, s Sink, try func() error) error {
	minB, maxB := p.MinBackoff, p.MaxBackoff
	if minB <= 0 {
		minB = 50 * time.Microsecond
	}
	if maxB <= 0 {
		maxB = 10 * time.Millisecond
	}
	if maxB < minB {
		maxB = minB
	}
	var space <-chan struct{}
	if n, ok := s.(SpaceNotifier); ok {
		ch, release := n.SpaceSignal()
		defer release()
		space = ch
	}
	backoff := minB
	var timer *time.Timer
	for {
		var err error = errBacklogged
		if !backlogged(s) {
			err = try()
		}
		if !retryable(err) {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(backoff)
			defer timer.Stop()
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-space:
		case <-timer.C:
		}
		backoff = min(2*backoff, maxB)
	}
}
