package gnutella

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Handler names in a Registry (see Node.Register).
const (
	HandlerServer  = "gnutella.Server"
	HandlerRouter  = "gnutella.Router"
	HandlerCatcher = "gnutella.Catcher"
)

// Default stage names, as wired in configs/gnutella.yaml.
const (
	StageServer  = "GnutellaServer"
	StageRouter  = "GnutellaRouter"
	StageCatcher = "GnutellaCatcher"
)

// DefaultAddr is the address GnutellaServer listens on unless told
// otherwise.
const DefaultAddr = "127.0.0.1:6346"

// ErrNotStarted: the GnutellaServer stage has not opened its socket yet.
var ErrNotStarted = errors.New("gnutella: server not started")

// Options are set from Go (a command's flags) and win over the stages'
// args.
type Options struct {
	// Addr is the listen address; it overrides GnutellaServer's socket.
	Addr string
	// QueryDelay, if not nil, overrides GnutellaRouter's queryDelay (the
	// thesis's deliberate bottleneck, §2.3).
	QueryDelay *time.Duration
	// Hosts are extra hosts for GnutellaCatcher to connect to.
	Hosts []string
	// Logger receives the router's logs (nil: the manager's).
	Logger *slog.Logger
}

// Node is one Gnutella router: the state its three stages share (the set
// of connected peers, the listening socket, the counters) and the factories
// that build the stages. Register the factories, build a manager from a
// configuration (configs/gnutella.yaml), start it: GnutellaServer opens
// the socket. Close the node (Shutdown) before the manager's Shutdown.
type Node struct {
	opts    Options
	servent ID

	mu          sync.Mutex
	peers       atomic.Pointer[[]*Peer] // handshaken peers, copy on write
	server      *aio.Server
	client      *aio.Client
	closed      bool
	stopCatcher func()

	stats counters
}

// New returns a router node.
func New(o Options) *Node {
	n := &Node{opts: o}
	_, _ = rand.Read(n.servent[:])
	n.peers.Store(&[]*Peer{})
	return n
}

// Register adds the router's handlers to r: gnutella.Server,
// gnutella.Router and gnutella.Catcher.
func (n *Node) Register(r *stage.Registry) {
	r.Register(HandlerServer, func() stage.Handler { return &server{node: n} })
	r.Register(HandlerRouter, func() stage.Handler { return &router{node: n} })
	r.Register(HandlerCatcher, func() stage.Handler { return &catcher{node: n} })
}

// Addr is the address the router listens on (nil before the GnutellaServer
// stage started).
func (n *Node) Addr() net.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.server == nil {
		return nil
	}
	return n.server.Addr()
}

// Peers returns the connected peers (handshake done).
func (n *Node) Peers() []*Peer { return *n.peers.Load() }

// Shutdown closes the listening socket and the Catcher's outgoing
// connections after their queued output, and waits for them.
func (n *Node) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	srv, cl, stop := n.server, n.client, n.stopCatcher
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
	var errs []error
	if srv != nil {
		errs = append(errs, srv.Shutdown(ctx))
	}
	if cl != nil {
		errs = append(errs, cl.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func (n *Node) setServer(s *aio.Server) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.server != nil || n.closed {
		return errors.New("gnutella: one GnutellaServer per node")
	}
	n.server = s
	return nil
}

func (n *Node) setClient(c *aio.Client) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.client != nil || n.closed {
		return errors.New("gnutella: one GnutellaCatcher per node")
	}
	n.client = c
	return nil
}

func (n *Node) setStopCatcher(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopCatcher = f
}

func (n *Node) addPeer(p *Peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := *n.peers.Load()
	ps := make([]*Peer, len(old), len(old)+1)
	copy(ps, old)
	ps = append(ps, p)
	n.peers.Store(&ps)
}

func (n *Node) removePeer(p *Peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := *n.peers.Load()
	ps := make([]*Peer, 0, len(old))
	for _, q := range old {
		if q != p {
			ps = append(ps, q)
		}
	}
	n.peers.Store(&ps)
}

// outgoing counts the connected peers the Catcher opened, by address.
func (n *Node) outgoing() map[string]bool {
	m := make(map[string]bool)
	for _, p := range n.Peers() {
		if p.outgoing {
			m[p.addr] = true
		}
	}
	return m
}

// Peer is a connection to another servent. Its handshake and descriptor
// stream are parsed by GnutellaServer (one goroutine); GnutellaRouter
// writes to it.
type Peer struct {
	conn     *aio.Connection
	outgoing bool   // opened by the Catcher
	addr     string // the address the Catcher dialled (outgoing only)

	// Owned by GnutellaServer's single goroutine.
	hs        []byte
	handshook bool
	parser    Parser

	closed atomic.Bool
}

// Conn is the peer's connection.
func (p *Peer) Conn() *aio.Connection { return p.conn }

// Outgoing reports whether this router opened the connection.
func (p *Peer) Outgoing() bool { return p.outgoing }

func (p *Peer) String() string { return p.conn.String() }

// send queues b (that many descriptors) on the peer's connection, counting a refusal: a clogged
// peer (aio closes it under clogPolicy close, the thesis's fix for slow
// peers) or a closed one.
func (n *Node) send(p *Peer, b []byte, descriptors int) bool {
	k := uint64(descriptors)
	if p.closed.Load() {
		n.stats.unroutable.Add(k)
		return false
	}
	if err := p.conn.Enqueue(b); err != nil {
		if errors.Is(err, aio.ErrClogged) {
			n.stats.refused.Add(k)
		} else {
			n.stats.unroutable.Add(k)
		}
		return false
	}
	n.stats.sent.Add(k)
	return true
}

// Stats are a node's counters (cumulative, but Peers).
type Stats struct {
	Peers       int    // connected peers now
	Handshakes  uint64 // handshakes completed (both directions)
	Received    uint64 // descriptors parsed
	Sent        uint64 // descriptors queued on peers (forwards, routed replies, own Pongs and Pings)
	Duplicates  uint64 // Ping and Query descriptors seen before: dropped
	Expired     uint64 // descriptors that arrived with TTL 0 or reached it: not forwarded
	Unroutable  uint64 // replies without a route, or to a peer that left
	Dropped     uint64 // descriptors the router's queue refused (overload)
	Refused     uint64 // writes refused because a peer's output passed its threshold
	SlowClosed  uint64 // peers closed for falling behind (clogged)
	BadPeers    uint64 // peers closed for a bad handshake or descriptor
	Rejected    uint64 // connections closed at their handshake: maxPeers were connected
	HostsLearnt uint64 // hosts the Catcher learnt from Pongs
	Connects    uint64 // outgoing connections the Catcher opened
}

type counters struct {
	handshakes, received, sent, duplicates, expired, unroutable,
	dropped, refused, slowClosed, badPeers, rejected, hosts, connects atomic.Uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	c := &n.stats
	return Stats{
		Peers: len(n.Peers()), Handshakes: c.handshakes.Load(), Received: c.received.Load(),
		Sent: c.sent.Load(), Duplicates: c.duplicates.Load(), Expired: c.expired.Load(),
		Unroutable: c.unroutable.Load(), Dropped: c.dropped.Load(), Refused: c.refused.Load(),
		SlowClosed: c.slowClosed.Load(), BadPeers: c.badPeers.Load(), Rejected: c.rejected.Load(), HostsLearnt: c.hosts.Load(),
		Connects: c.connects.Load(),
	}
}

// profile registers the counters with a stage's profiler values.
func (n *Node) profile(c *stage.Context) {
	for name, v := range map[string]*atomic.Uint64{
		"gnutella.received": &n.stats.received, "gnutella.sent": &n.stats.sent,
		"gnutella.duplicates": &n.stats.duplicates, "gnutella.expired": &n.stats.expired,
		"gnutella.unroutable": &n.stats.unroutable, "gnutella.dropped": &n.stats.dropped,
		"gnutella.slowClosed": &n.stats.slowClosed, "gnutella.badPeers": &n.stats.badPeers,
	} {
		c.Profile(name, func() float64 { return float64(v.Load()) })
	}
	c.Profile("gnutella.peers", func() float64 { return float64(len(n.Peers())) })
}

func (n *Node) logger(c *stage.Context) *slog.Logger {
	if n.opts.Logger != nil {
		return n.opts.Logger
	}
	return c.Logger()
}
