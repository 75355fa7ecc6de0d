package aio

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Client makes outgoing connections (Sandstorm's asyncClientSocket). One
// Client runs a gnet client engine (its event loops) and a maintenance
// goroutine for all its connections; Close or Shutdown stops and waits for
// them.
type Client struct {
	eng    *engine
	loops  *eventLoops
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	draining bool
	dials    sync.WaitGroup
	pending  atomic.Int64 // dials in progress
}

// NewClient starts a client socket. cfg.Addr is ignored; each Connect names
// its address. env is what the socket is plugged into (see Env; the zero
// Env will do).
func NewClient(cfg SocketConfig, env Env) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg, env = cfg.withDefaults(), env.withDefaults()
	name := cfg.Name
	if name == "" {
		name = "client"
	}
	e := newEngine(cfg, env, name)
	if cfg.TLS != nil {
		var err error
		if e.tls, err = newTLSClient(cfg, env.Manager); err != nil {
			return nil, err
		}
	}
	loops, err := startEventLoops(e)
	if err != nil {
		e.setClosing()
		e.finish(nil, nil)
		return nil, fmt.Errorf("aio: client: %w", err)
	}
	e.start()
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{eng: e, loops: loops, ctx: ctx, cancel: cancel}, nil
}

// Connect dials addr (host:port, or tcp://, tcp4://, tcp6://, unix://) in
// the background and delivers to s either the *Connection, whose Value is
// value, or ConnectFailed. It returns an error only if the request itself
// is bad or the client is closed.
func (cl *Client) Connect(addr string, s Receiver, value any) error {
	if s == nil {
		return fmt.Errorf("%w: Connect with a nil sink", ErrBadEvent)
	}
	_, network, address, err := splitAddr(addr)
	if err != nil {
		return err
	}
	cl.mu.Lock()
	if cl.closed || cl.draining {
		cl.mu.Unlock()
		return ErrSocketClosed
	}
	cl.dials.Add(1)
	cl.pending.Add(1)
	cl.mu.Unlock()
	c := newConnection(cl.eng, s, value)
	c.dialHost = address
	if h, _, err := net.SplitHostPort(address); err == nil {
		c.dialHost = h
	}
	go cl.dial(c, addr, network, address)
	return nil
}

func (cl *Client) dial(c *Connection, addr, network, address string) {
	defer cl.dials.Done()
	defer cl.pending.Add(-1)
	ctx, cancel := context.WithTimeout(cl.ctx, cl.eng.cfg.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err == nil {
		// Enroll dups the descriptor, closes nc and runs OnOpen, which
		// delivers the Connection, before it returns.
		_, err = cl.loops.enroll(nc, c)
	}
	if err != nil {
		cl.eng.stats.connectFailed.Add(1)
		cl.eng.box.send(delivery{to: c.owner, ev: ConnectFailed{Addr: addr, Value: c.Value(), Err: err}})
	}
}

// Name is the socket's name in metrics and logs.
func (cl *Client) Name() string { return cl.eng.name }

// MetricsPrefix is the prefix of the socket's metrics (see
// Server.MetricsPrefix).
func (cl *Client) MetricsPrefix() string { return cl.eng.metricPrefix }

// Stats returns the socket's counters.
func (cl *Client) Stats() SocketStats { return cl.eng.snapshotStats() }

// Connections returns the open connections.
func (cl *Client) Connections() []*Connection { return cl.eng.snapshot() }

// Close aborts pending connects, closes every connection now (unsent output
// is dropped and reported) and waits for the event loops and the
// maintenance goroutine. Close is idempotent. It waits for the event
// loops, so it must not be called from a sink's Enqueue running on one.
func (cl *Client) Close() error {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.closed = true
	cl.mu.Unlock()
	cl.cancel()
	cl.dials.Wait() // the event loops still run, so enrolls finish
	cl.eng.setClosing()
	err := cl.loops.stop()
	cl.eng.finish(nil, nil)
	if err != nil {
		return fmt.Errorf("aio: client close: %w", err)
	}
	return nil
}

// Shutdown closes every connection after its queued output, waits until
// they are closed and their events delivered (or ctx ends), then Closes.
func (cl *Client) Shutdown(ctx context.Context) error {
	cl.mu.Lock()
	cl.draining = true // no new connects
	cl.mu.Unlock()
	return shutdown(ctx, cl.eng, func() bool { return cl.pending.Load() > 0 }, cl.Close)
}
