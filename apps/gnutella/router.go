package gnutella

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Originate asks GnutellaRouter to send a descriptor of this node's own
// (the Catcher's Pings) to every peer; the replies come back to Reply.
type Originate struct {
	D     Descriptor
	Reply sink.Sink // receives the Pongs answering it (nil: none)
}

// HostSeen tells GnutellaCatcher of a host a Pong advertised.
type HostSeen struct{ Addr netip.AddrPort }

// routerArgs are GnutellaRouter's args.
type routerArgs struct {
	// Catcher names the stage that learns hosts from Pongs ("" for none;
	// default GnutellaCatcher if the stage exists).
	Catcher *string `yaml:"catcher"`
	// QueryDelay is the thesis's deliberate bottleneck (§2.3): the handler
	// sleeps this long for every Query it routes (0: none).
	QueryDelay time.Duration `yaml:"queryDelay"`
	// MaxTTL caps a descriptor's TTL (default 7): larger ones are lowered.
	MaxTTL int `yaml:"maxTTL"`
	// Routes bounds each routing table (Ping, Query and Push routes): at
	// most Size entries, each kept at most Age (defaults 100000, 10m).
	Routes struct {
		Size int           `yaml:"size"`
		Age  time.Duration `yaml:"age"`
	} `yaml:"routes"`
	// Pong: answer every Ping with a Pong for this node (default true).
	Pong *bool `yaml:"pong"`
}

// router is the GnutellaRouter stage: it routes every descriptor as
// Gnutella 0.4 says. Pings and Queries are broadcast to every peer but
// the one they came from, once (a descriptor ID already routed is a
// duplicate and dropped), with TTL decremented and hops incremented
// (none is forwarded whose TTL reaches 0); Pongs and QueryHits go back
// along the path their Ping or Query came by, Pushes along the path of
// the QueryHit that carried their servent ID. It may run on many
// goroutines (the thread-pool controller sizes it); its tables have their
// own lock.
type router struct {
	node    *Node
	log     *slog.Logger
	args    routerArgs
	catcher sink.Sink
	ctx     *stage.Context
	self    atomic.Pointer[[]byte] // this node's Pong payload, once its address is known
	now     func() time.Time

	mu     sync.Mutex
	pings  *routeTable             // Ping ID → where it came from
	query  *routeTable             // Query ID → where it came from
	pushes *routeTable             // servent ID → where its QueryHit came from
	told   map[netip.AddrPort]bool // hosts recently passed to the Catcher
}

func (r *router) Init(c *stage.Context) error {
	r.log = r.node.logger(c)
	r.ctx = c
	r.args.MaxTTL = 7
	r.args.Routes.Size = 100000
	r.args.Routes.Age = 10 * time.Minute
	if err := c.DecodeArgs(&r.args); err != nil {
		return err
	}
	a := &r.args
	if r.node.opts.QueryDelay != nil {
		a.QueryDelay = *r.node.opts.QueryDelay
	}
	if a.MaxTTL < 1 || a.MaxTTL > 255 || a.Routes.Size < 2 || a.Routes.Age <= 0 || a.QueryDelay < 0 {
		return fmt.Errorf("gnutella: GnutellaRouter: maxTTL must be in 1..255, routes.size ≥ 2, routes.age and queryDelay positive")
	}
	name := StageCatcher
	if a.Catcher != nil {
		name = *a.Catcher
	}
	if _, ok := c.Manager().Stage(name); ok && name != "" {
		var err error
		if r.catcher, err = c.Sink(name); err != nil {
			return err
		}
	} else if a.Catcher != nil && name != "" {
		return fmt.Errorf("gnutella: GnutellaRouter catcher stage %q: %w", name, stage.ErrNoStage)
	}
	r.now = time.Now
	r.pings = newRouteTable(a.Routes.Size, a.Routes.Age)
	r.query = newRouteTable(a.Routes.Size, a.Routes.Age)
	r.pushes = newRouteTable(a.Routes.Size, a.Routes.Age)
	r.told = make(map[netip.AddrPort]bool)
	c.Profile("gnutella.routes", func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(r.pings.len() + r.query.len() + r.pushes.len())
	})
	return nil
}

// outbox gathers what one batch sends to each peer, so that a peer gets
// one write per batch rather than one per descriptor (a system call each).
type outbox struct {
	node  *Node
	peers []*Peer
	bufs  map[*Peer]*pending
}

type pending struct {
	b     []byte
	n     int  // descriptors in b
	owned bool // b was allocated here (else it is shared, not to be appended to)
}

func (o *outbox) add(p *Peer, b []byte) {
	if o.bufs == nil {
		o.bufs = make(map[*Peer]*pending)
	}
	w := o.bufs[p]
	switch {
	case w == nil:
		o.peers = append(o.peers, p)
		o.bufs[p] = &pending{b: b, n: 1}
	case w.owned:
		w.b = append(w.b, b...)
		w.n++
	default:
		w.b = append(append(make([]byte, 0, 2*(len(w.b)+len(b))), w.b...), b...)
		w.n++
		w.owned = true
	}
}

// flush writes what was gathered, in the order peers were first written.
func (o *outbox) flush() {
	for _, p := range o.peers {
		w := o.bufs[p]
		o.node.send(p, w.b, w.n)
		delete(o.bufs, p)
	}
	o.peers = o.peers[:0]
}

func (r *router) HandleEvents(batch []sink.Event) error {
	out := &outbox{node: r.node}
	defer out.flush()
	for _, e := range batch {
		switch v := e.(type) {
		case Arrival:
			r.route(v.From, &v.D, out)
		case Originate:
			r.originate(v, out)
		default:
			r.log.Warn("gnutella: GnutellaRouter: unexpected event", "type", fmt.Sprintf("%T", e))
		}
	}
	return nil
}

// route routes one descriptor that arrived from peer from.
func (r *router) route(from *Peer, d *Descriptor, out *outbox) {
	n := r.node
	if d.TTL == 0 {
		n.stats.expired.Add(1)
		return
	}
	if int(d.TTL) > r.args.MaxTTL {
		d.TTL = byte(r.args.MaxTTL)
	}
	switch d.Type {
	case TypePing, TypeQuery:
		t := r.pings
		if d.Type == TypeQuery {
			t = r.query
		}
		r.mu.Lock()
		fresh := t.add(d.ID, route{peer: from}, r.now())
		r.mu.Unlock()
		if !fresh {
			n.stats.duplicates.Add(1)
			return
		}
		if d.Type == TypeQuery && r.args.QueryDelay > 0 {
			out.flush()                   // what the batch routed so far does not wait
			time.Sleep(r.args.QueryDelay) // the deliberate bottleneck
		}
		if d.Type == TypePing && (r.args.Pong == nil || *r.args.Pong) {
			pong := Descriptor{Header: Header{ID: d.ID, Type: TypePong, TTL: d.Hops + 1}, Payload: r.selfPong()}
			out.add(from, pong.Bytes())
		}
		if !r.age(d) {
			return
		}
		b := d.Bytes()
		for _, p := range n.Peers() {
			if p != from {
				out.add(p, b)
			}
		}
	case TypePong, TypeQueryHit, TypePush:
		var t *routeTable
		var key ID
		switch d.Type {
		case TypePong:
			t, key = r.pings, d.ID
			if pong, err := ParsePong(d.Payload); err == nil && r.catcher != nil && pong.Port != 0 && r.newHost(pong.Addr()) {
				r.catcher.EnqueueLossy(HostSeen{Addr: pong.Addr()})
			}
		case TypeQueryHit:
			t, key = r.query, d.ID
		case TypePush:
			t = r.pushes
			copy(key[:], d.Payload[:16])
		}
		now := r.now()
		r.mu.Lock()
		to, ok := t.get(key, now)
		if ok && d.Type == TypeQueryHit {
			// Pushes for the servent that answered go back this way.
			copy(key[:], d.Payload[len(d.Payload)-16:])
			r.pushes.put(key, route{peer: from}, now)
		}
		r.mu.Unlock()
		switch {
		case !ok:
			n.stats.unroutable.Add(1)
		case to.peer == nil: // our own Ping
			if to.reply != nil {
				to.reply.EnqueueLossy(Arrival{From: from, D: *d, At: now})
			}
		case r.age(d):
			out.add(to.peer, d.Bytes())
		}
	}
}

// newHost reports whether the Catcher has not been told of a recently:
// every Pong passing through names a host, mostly the same few.
func (r *router) newHost(a netip.AddrPort) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told[a] {
		return false
	}
	if len(r.told) >= maxTold {
		clear(r.told)
	}
	r.told[a] = true
	return true
}

// maxTold bounds the hosts the router remembers having passed on.
const maxTold = 1024

// selfPong is the payload of this node's Pongs: its listening address
// (GnutellaServer may start after this stage).
func (r *router) selfPong() []byte {
	if p := r.self.Load(); p != nil {
		return *p
	}
	ad := r.node.Addr()
	if ad == nil {
		return Pong{IP: netip.AddrFrom4([4]byte{127, 0, 0, 1})}.Append(nil)
	}
	var pong Pong
	if ap, err := netip.ParseAddrPort(ad.String()); err == nil {
		pong = Pong{Port: ap.Port(), IP: ap.Addr().Unmap()}
	}
	b := pong.Append(nil)
	r.self.Store(&b)
	return b
}

// age decrements d's TTL and increments its hops before a forward; it
// reports false (counted) when the TTL runs out.
func (r *router) age(d *Descriptor) bool {
	d.TTL--
	if d.Hops < 255 {
		d.Hops++
	}
	if d.TTL == 0 {
		r.node.stats.expired.Add(1)
		return false
	}
	return true
}

func (r *router) originate(o Originate, out *outbox) {
	r.mu.Lock()
	t := r.pings
	if o.D.Type == TypeQuery {
		t = r.query
	}
	reply := o.Reply
	if reply != nil {
		reply = r.ctx.Traced(reply) // the replies are sent by this stage
	}
	fresh := t.add(o.D.ID, route{reply: reply}, r.now())
	r.mu.Unlock()
	if !fresh {
		return
	}
	b := o.D.Bytes()
	for _, p := range r.node.Peers() {
		out.add(p, b)
	}
}

// route is where replies to a descriptor go: a peer, or (peer nil) this
// node's own sink.
type route struct {
	peer  *Peer
	reply sink.Sink
}

// routeTable maps descriptor IDs to routes, bounded in size and in age by
// two generations: entries go into the current map; when it holds size/2
// entries or is age/2 old it becomes the previous one and the old previous
// is dropped, and a previous generation that began age ago is dropped. So
// the table holds at most size entries, none older than age.
type routeTable struct {
	size                int
	age                 time.Duration
	cur, prev           map[ID]route
	curStart, prevStart time.Time
}

func newRouteTable(size int, age time.Duration) *routeTable {
	return &routeTable{size: size, age: age, cur: make(map[ID]route), prev: make(map[ID]route)}
}

func (t *routeTable) rotate(now time.Time) {
	if t.curStart.IsZero() {
		t.curStart = now
	}
	if len(t.cur) >= t.size/2 || now.Sub(t.curStart) >= t.age/2 {
		t.prev, t.cur = t.cur, t.prev
		clear(t.cur)
		t.prevStart, t.curStart = t.curStart, now
	}
	if len(t.prev) > 0 && now.Sub(t.prevStart) >= t.age {
		clear(t.prev)
	}
}

func (t *routeTable) get(id ID, now time.Time) (route, bool) {
	t.rotate(now)
	if r, ok := t.cur[id]; ok {
		return r, true
	}
	r, ok := t.prev[id]
	return r, ok
}

// add records id → r unless id is known; it reports whether it was new.
func (t *routeTable) add(id ID, r route, now time.Time) bool {
	if _, ok := t.get(id, now); ok {
		return false
	}
	t.cur[id] = r
	return true
}

// put records id → r, replacing an older route.
func (t *routeTable) put(id ID, r route, now time.Time) {
	t.rotate(now)
	delete(t.prev, id)
	t.cur[id] = r
}

func (t *routeTable) len() int { return len(t.cur) + len(t.prev) }
