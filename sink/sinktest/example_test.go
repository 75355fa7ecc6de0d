package sinktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/sink/sinktest"
)

// mailbox is a Sink over a buffered channel: its predicate lives in a
// sink.Admission, and each admitted event travels with its Ticket until
// the consumer completes it.
type mailbox struct {
	adm sink.Admission
	ch  chan held

	mu       sync.Mutex
	closed   bool
	reserved int // room held by prepared transactions
}

type held struct {
	e      sink.Event
	ticket sink.Ticket
	at     time.Time
}

func newMailbox(capacity int) *mailbox { return &mailbox{ch: make(chan held, capacity)} }

func (m *mailbox) String() string                { return "mailbox" }
func (m *mailbox) SetPredicate(p sink.Predicate) { m.adm.SetPredicate(m, p) }
func (m *mailbox) Predicate() sink.Predicate     { return m.adm.Predicate() }
func (m *mailbox) Len() int                      { return len(m.ch) }
func (m *mailbox) Enqueue(e sink.Event) error    { return m.put([]sink.Event{e}) }
func (m *mailbox) EnqueueLossy(e sink.Event) bool {
	return m.Enqueue(e) == nil
}

func (m *mailbox) EnqueueMany(es []sink.Event) error {
	if len(es) == 0 {
		return nil
	}
	return m.put(es)
}

// room checks the sink's own reasons to refuse, before the predicate is
// asked (so they cost it nothing). The caller holds m.mu.
func (m *mailbox) roomLocked(n int) error {
	if m.closed {
		return &sink.ClosedError{Sink: m.String()}
	}
	if len(m.ch)+m.reserved+n > cap(m.ch) {
		return &sink.RejectError{Sink: m.String(), Reason: "full"}
	}
	return nil
}

func (m *mailbox) put(es []sink.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.roomLocked(len(es)); err != nil {
		return err
	}
	t, err := m.adm.AdmitMany(es)
	if err != nil {
		return err
	}
	for _, e := range es {
		m.ch <- held{e, t, time.Now()} // room was checked under m.mu
	}
	return nil
}

func (m *mailbox) Prepare(es []sink.Event) (sink.Txn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.roomLocked(len(es)); err != nil {
		return nil, err
	}
	t, err := m.adm.AdmitMany(es)
	if err != nil {
		return nil, err
	}
	m.reserved += len(es)
	return &txn{m: m, es: append([]sink.Event(nil), es...), ticket: t}, nil
}

// txn holds room and the events' Ticket until Commit (queued, completed
// by the consumer later) or Abort (cancelled now).
type txn struct {
	m      *mailbox
	es     []sink.Event
	ticket sink.Ticket
	once   sync.Once
}

func (t *txn) Commit() {
	t.once.Do(func() {
		t.m.mu.Lock()
		defer t.m.mu.Unlock()
		t.m.reserved -= len(t.es)
		for _, e := range t.es {
			t.m.ch <- held{e, t.ticket, time.Now()}
		}
	})
}

func (t *txn) Abort() {
	t.once.Do(func() {
		t.m.mu.Lock()
		t.m.reserved -= len(t.es)
		t.m.mu.Unlock()
		for _, e := range t.es {
			t.ticket.Cancel(e)
		}
	})
}

// Close stops intake; queued events still come out.
func (m *mailbox) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// take hands the next event to its consumer and completes it.
func (m *mailbox) take() (sink.Event, bool) {
	select {
	case h := <-m.ch:
		h.ticket.Done(h.e, time.Since(h.at), 0)
		return h.e, true
	case <-time.After(5 * time.Second):
		return nil, false
	}
}

// mailboxConformance is the test: sinktest.Run with a fresh mailbox per
// property.
func mailboxConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		m := newMailbox(100)
		return sinktest.Harness{
			Sink:              m,
			Consume:           m.take,
			Close:             m.Close,
			ConsumeAfterClose: true,
			LenExact:          true,
		}
	})
}

// Run the conformance suite from a test of the package that implements
// the sink:
//
//	func TestMailbox(t *testing.T) { mailboxConformance(t) }
func ExampleRun() {
	_ = mailboxConformance
}
