package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// clusterFlags are the -node, -nats, -nats-listen, -nats-token-file,
// -nats-nkey-file, -nats-creds-file and -nats-tls-{cert,key,ca} flags:
// each one given overrides its key of global.cluster.
type clusterFlags struct {
	// ctx is done once the process is asked to stop (SIGINT, SIGTERM):
	// it ends a wait for the NATS server.
	ctx                       context.Context
	node, nats, listen        optionalString
	tokenFile, nkeyFile       optionalString
	credsFile                 optionalString
	natsCert, natsKey, natsCA optionalString
	tls                       tlsFlags // the HTTPS flags travel along to buildNode
	access                    accessLogFlags
	otel                      string // -otel (otel.go)
}

// tlsFlags are -tls-addr, -tls-cert and -tls-key.
type tlsFlags struct {
	addr, cert, key string
	noHTTP2         bool
}

// given reports whether any cluster flag was given.
func (f *clusterFlags) given() bool {
	return f.node.set || f.nats.set || f.listen.set || f.tokenFile.set || f.nkeyFile.set || f.credsFile.set ||
		f.natsCert.set || f.natsKey.set || f.natsCA.set
}

func (f *clusterFlags) override(cc *remote.ClusterConfig) {
	if f.node.set {
		cc.Node = f.node.value
	}
	if f.nats.set {
		cc.NATS = f.nats.value
	}
	if f.listen.set {
		cc.Listen = f.listen.value
	}
	if f.tokenFile.set {
		cc.TokenFile = f.tokenFile.value
	}
	if f.nkeyFile.set {
		cc.NKeyFile = f.nkeyFile.value
	}
	if f.credsFile.set {
		cc.CredsFile = f.credsFile.value
	}
	if f.natsCert.set {
		cc.TLS.Cert = f.natsCert.value
	}
	if f.natsKey.set {
		cc.TLS.Key = f.natsKey.value
	}
	if f.natsCA.set {
		cc.TLS.CA = f.natsCA.value
	}
}

// haboobCodecs are the codecs of the events Haboob's stages exchange
// across nodes: a request goes from HttpRecv (front) to a dynamic stage
// (worker), and its reply comes back to HttpSend (front).
//
// A request travels as plain data plus a reference to the front's own
// *http.Request (kept there with Wire.Keep); on the worker the reference
// sits in Request.Conn, so the reply the worker sends names the original
// request, which the front takes back (Wire.Take) to answer on its
// connection. Replies carry an in-memory response; a streamed reply or a
// completion callback cannot cross nodes and is an error at Enqueue.
func haboobCodecs() *remote.Codecs { return haboobCodecsFor(nil) }

// haboobCodecsFor is haboobCodecs telling o (if not nil) of the replies
// that came back, so that it stops following their requests.
func haboobCodecsFor(o *orphans) *remote.Codecs {
	c := remote.NewCodecs()
	remote.RegisterFunc(c, "haboob.Request", encodeRequest, decodeRequest)
	remote.RegisterFunc(c, "haboob.Reply", encodeReply, func(w *remote.Wire, data []byte) (*http.Reply, error) {
		r, err := decodeReply(w, data)
		if err == nil && o != nil {
			o.replied(r.Req) // back home: no longer the worker's
		}
		return r, err
	})
	// With several front nodes (all hosting HttpSend), a worker's reply
	// goes to the front that holds its request's connection.
	remote.SetHome(c, replyHome)
	return c
}

// replyHome is the front instance a reply belongs to: the one its
// request came from, when the request came from another node.
func replyHome(r *http.Reply) string {
	if r == nil || r.Req == nil {
		return ""
	}
	if ref, ok := r.Req.Conn.(requestRef); ok {
		return ref.Inst
	}
	return ""
}

// servesFiles reports whether this process hosts a stage that reads the
// document root (CacheMiss): a cluster node that does not (a worker)
// needs no site. cf's -node overrides the configuration's node name.
func servesFiles(cfg *stage.Config, cf *clusterFlags) bool {
	cc, ok, err := remote.ClusterFrom(cfg)
	if !ok || err != nil {
		return true // one process: it serves everything (errors: found later)
	}
	if cf != nil {
		cf.override(&cc)
	}
	for i := range cfg.Stages {
		sc := &cfg.Stages[i].Config
		if sc.Handler == haboob.HandlerCacheMiss && sc.HostedOn(cc.Node) {
			return true
		}
	}
	return false
}

// requestRef names a front node's request on a worker (in Request.Conn).
type requestRef struct {
	Inst string `json:"i"`
	ID   uint64 `json:"id"`
}

type wireRequest struct {
	Ref      requestRef    `json:"ref"`
	Method   string        `json:"m"`
	Target   string        `json:"t"`
	Path     string        `json:"p"`
	RawQuery string        `json:"q,omitempty"`
	Proto    string        `json:"proto"`
	Minor    int           `json:"minor"`
	Host     string        `json:"host,omitempty"`
	Header   []http.Field  `json:"h,omitempty"`
	Body     []byte        `json:"b,omitempty"`
	Close    bool          `json:"close,omitempty"`
	Class    int           `json:"class,omitempty"`
	Age      time.Duration `json:"age,omitempty"` // since Received, clocks differ
	Seq      uint64        `json:"seq"`
}

func encodeRequest(w *remote.Wire, r *http.Request) ([]byte, error) {
	if r == nil {
		return nil, errors.New("nil request")
	}
	ref, ok := r.Conn.(requestRef)
	if !ok { // a request of this node: keep it for the reply
		ref = requestRef{Inst: w.Instance(), ID: w.Keep(r)}
	}
	wr := wireRequest{Ref: ref, Method: r.Method, Target: r.Target, Path: r.Path, RawQuery: r.RawQuery,
		Proto: r.Proto, Minor: r.Minor, Host: r.Host, Header: r.Header, Body: r.Body, Close: r.Close,
		Class: r.Class(), Seq: r.Seq}
	if !r.Received.IsZero() {
		wr.Age = time.Since(r.Received)
	}
	return json.Marshal(wr)
}

func decodeRequest(w *remote.Wire, data []byte) (*http.Request, error) {
	var wr wireRequest
	if err := json.Unmarshal(data, &wr); err != nil {
		return nil, err
	}
	if wr.Ref.Inst == w.Instance() {
		if v, ok := w.Take(wr.Ref.ID); ok {
			return v.(*http.Request), nil // back home
		}
		return nil, fmt.Errorf("request #%d expired", wr.Ref.ID)
	}
	req := &http.Request{Method: wr.Method, Target: wr.Target, Path: wr.Path, RawQuery: wr.RawQuery,
		Proto: wr.Proto, Major: 1, Minor: wr.Minor, Host: wr.Host, Header: wr.Header, Body: wr.Body,
		Close: wr.Close, Received: time.Now().Add(-wr.Age), Conn: wr.Ref, Seq: wr.Seq}
	req.SetClass(wr.Class)
	return req, nil
}

type wireReply struct {
	Req    json.RawMessage `json:"req"`
	Status int             `json:"s"`
	Header []http.Field    `json:"h,omitempty"`
	Body   []byte          `json:"b,omitempty"`
	Close  bool            `json:"close,omitempty"`
}

func encodeReply(w *remote.Wire, r *http.Reply) ([]byte, error) {
	switch {
	case r == nil || r.Req == nil || r.Resp == nil:
		return nil, errors.New("a reply needs its request and response")
	case r.Done != nil || r.Stream != nil || r.Body != nil || (r.Resp.Body == nil && r.Resp.ContentLength > 0):
		return nil, errors.New("only in-memory replies cross nodes (no Done, Stream or Body buffers)")
	}
	req, err := encodeRequest(w, r.Req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wireReply{Req: req, Status: r.Resp.Status, Header: r.Resp.Header, Body: r.Resp.Body, Close: r.Resp.Close})
}

func decodeReply(w *remote.Wire, data []byte) (*http.Reply, error) {
	var wr wireReply
	if err := json.Unmarshal(data, &wr); err != nil {
		return nil, err
	}
	req, err := decodeRequest(w, wr.Req)
	if err != nil {
		return nil, err
	}
	resp := &http.Response{Status: wr.Status, Header: wr.Header, Body: wr.Body, ContentLength: int64(len(wr.Body)), Close: wr.Close}
	return &http.Reply{Req: req, Resp: resp}, nil
}

// context returns the context that ends a wait for the NATS server (nil:
// no flags, Join's own bound).
func (f *clusterFlags) context() context.Context {
	if f == nil {
		return nil
	}
	return f.ctx
}

// orphans answers at once the HTTP requests a worker had admitted when
// the front takes that worker out of rotation (it died, or stopped
// answering): 503 with Retry-After instead of waiting for HttpRecv's
// responseTimeout. It is the front's remote.ReplicaWatcher.
type orphans struct {
	wire       atomic.Pointer[remote.Wire]
	retryAfter time.Duration
	keep       time.Duration // how long a request is followed (the cluster's keepTTL)

	mu     sync.Mutex
	held   map[*http.Request]heldRequest // admitted by a worker, no reply yet
	pruned time.Time
	// answered counts the requests answered 503 because their worker left.
	answered atomic.Uint64
}

type heldRequest struct {
	inst string // the worker's instance
	at   time.Time
}

func newOrphans(keep time.Duration) *orphans {
	return &orphans{retryAfter: time.Second, keep: keep, held: map[*http.Request]heldRequest{}, pruned: time.Now()}
}

// Admitted follows a request of this front's that a worker admitted.
func (o *orphans) Admitted(_, inst string, e sink.Event) {
	r, ok := e.(*http.Request)
	if !ok {
		return
	}
	if _, conn := r.Conn.(*http.Connection); !conn {
		return // not a request of this node's connections
	}
	now := time.Now()
	o.mu.Lock()
	o.held[r] = heldRequest{inst: inst, at: now}
	if now.Sub(o.pruned) > o.keep {
		// requests nobody answered: HttpRecv's responseTimeout did
		for req, h := range o.held {
			if now.Sub(h.at) > o.keep {
				delete(o.held, req)
			}
		}
		o.pruned = now
	}
	o.mu.Unlock()
}

// replied stops following a request whose reply came back.
func (o *orphans) replied(r *http.Request) {
	o.mu.Lock()
	delete(o.held, r)
	o.mu.Unlock()
}

// Out answers 503 to the requests worker inst had admitted and not
// replied to. A reply racing with it loses (Wire.Release or Take: the
// first wins).
func (o *orphans) Out(_, inst string) {
	w := o.wire.Load()
	if w == nil {
		return
	}
	var lost []*http.Request
	o.mu.Lock()
	for r, h := range o.held {
		if h.inst == inst {
			lost = append(lost, r)
			delete(o.held, r)
		}
	}
	o.mu.Unlock()
	for _, r := range lost {
		if !w.Release(r) {
			continue // its reply came back meanwhile
		}
		if c, ok := r.Conn.(*http.Connection); ok {
			_ = c.Reject(r, o.retryAfter)
			o.answered.Add(1)
		}
	}
}

// watch starts answering orphans on node's wire, and publishes their
// count as the metric haboob.orphans.answered (nothing without a cluster).
func (o *orphans) watch(n *remote.Node, m *stage.Manager) {
	if n == nil {
		return
	}
	o.wire.Store(n.Wire())
	_ = m.Metrics().Register("haboob.orphans.answered", metrics.NewFunctionalGauge(func() int64 { return int64(o.answered.Load()) }))
}

// keepTTL is how long a request waiting for a worker's reply is kept:
// global.cluster.keepTTL (default 2m).
func keepTTL(cfg *stage.Config) time.Duration {
	if cc, ok, err := remote.ClusterFrom(cfg); ok && err == nil && cc.KeepTTL > 0 {
		return cc.KeepTTL
	}
	return 2 * time.Minute
}
