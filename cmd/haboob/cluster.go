package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/remote"
)

// clusterFlags are the -node, -nats, -nats-listen, -nats-token-file and
// -nats-tls-{cert,key,ca} flags: each one given overrides its key of
// global.cluster.
type clusterFlags struct {
	node, nats, listen        optionalString
	tokenFile                 optionalString
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
	return f.node.set || f.nats.set || f.listen.set || f.tokenFile.set || f.natsCert.set || f.natsKey.set || f.natsCA.set
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
func haboobCodecs() *remote.Codecs {
	c := remote.NewCodecs()
	remote.RegisterFunc(c, "haboob.Request", encodeRequest, decodeRequest)
	remote.RegisterFunc(c, "haboob.Reply", encodeReply, decodeReply)
	return c
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
