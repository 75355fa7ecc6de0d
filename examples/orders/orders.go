// Command orders is an example service on Sandstorm for Go: a JSON API on
// net/http whose requests go through three typed stages, wired in YAML
// (orders.yaml), and back:
//
//	POST /orders → Validate → Price → Reserve → 200 {"id": ..., "total": ...}
//
// Each stage is a stage.TypedFunc over *stage.Request[Order, Receipt]; the
// HTTP front is nethttp.JSON on Validate's sink. Reserve is the
// bottleneck (it simulates a few milliseconds of work per order on a
// bounded pool); its bounded queue is where overload shows: Price gets a
// rejection, fails the request with it, and the client gets 503 with
// Retry-After at once instead of waiting in an ever longer queue.
//
//	go run ./examples/orders                 # serves on 127.0.0.1:8090
//	go run ./examples/orders -load 256 -for 10s -url http://127.0.0.1:8090/orders
//
// See README.md for a load test.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/nethttp"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Order is the API's request body.
type Order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

// Receipt is the API's answer.
type Receipt struct {
	ID    string  `json:"id"`
	Item  string  `json:"item"`
	Qty   int     `json:"qty"`
	Total float64 `json:"total"`
}

// Call is the event every stage of the service handles: the order and
// where its answer goes.
type Call = stage.Request[Order, Receipt]

// priced is what Price adds to an order on its way to Reserve.
type priced struct {
	*Call
	total float64
}

var prices = map[string]float64{"widget": 2.5, "gadget": 10, "gizmo": 99.99}

//go:embed orders.yaml
var config []byte

var configName = "orders.yaml"

// register names the three stages' handlers for orders.yaml.
func register(reg *stage.Registry) {
	reg.Register("orders.Validate", func() stage.Handler { return stage.Typed[*Call](&validate{}) })
	reg.StageArgs("orders.Validate", "next")
	reg.Register("orders.Price", func() stage.Handler { return stage.Typed[*Call](&price{}) })
	reg.StageArgs("orders.Price", "next")
	reg.Register("orders.Reserve", func() stage.Handler { return stage.Typed[priced](&reserve{}) })
}

// validate refuses malformed orders with 422 and passes the others on.
type validate struct {
	Args struct {
		Next string `yaml:"next"`
	}
	next stage.TypedSink[*Call]
}

func (v *validate) Init(c *stage.Context) (err error) {
	if err = c.DecodeArgs(&v.Args); err != nil {
		return err
	}
	v.next, err = stage.SinkFor[*Call](c, v.Args.Next)
	return err
}

func (v *validate) Handle(batch []*Call) error {
	for _, r := range batch {
		o := r.Value
		switch {
		case o.Qty <= 0 || o.Qty > 1000:
			r.Fail(nethttp.Error(http.StatusUnprocessableEntity, "qty must be between 1 and 1000"))
		case prices[strings.ToLower(o.Item)] == 0:
			r.Fail(nethttp.Error(http.StatusUnprocessableEntity, fmt.Sprintf("no such item %q", o.Item)))
		default:
			if err := v.next.Enqueue(r); err != nil {
				r.Fail(err) // a rejection downstream: 503 to the client
			}
		}
	}
	return nil
}

// price computes the total and passes the order on to Reserve.
type price struct {
	Args struct {
		Next string `yaml:"next"`
	}
	next stage.TypedSink[priced]
}

func (p *price) Init(c *stage.Context) (err error) {
	if err = c.DecodeArgs(&p.Args); err != nil {
		return err
	}
	p.next, err = stage.SinkFor[priced](c, p.Args.Next)
	return err
}

func (p *price) Handle(batch []*Call) error {
	for _, r := range batch {
		total := prices[strings.ToLower(r.Value.Item)] * float64(r.Value.Qty)
		if err := p.next.Enqueue(priced{Call: r, total: total}); err != nil {
			r.Fail(err) // Reserve's queue is full: 503 with Retry-After
		}
	}
	return nil
}

// reserve is the bottleneck: it holds each order for Args.Work (a call to
// an inventory service, say) and answers it.
type reserve struct {
	Args struct {
		Work time.Duration `yaml:"work"`
	}
	seq atomic.Uint64
}

func (r *reserve) Init(c *stage.Context) error {
	r.Args.Work = 2 * time.Millisecond
	return c.DecodeArgs(&r.Args)
}

func (r *reserve) Handle(batch []priced) error {
	for _, p := range batch {
		time.Sleep(r.Args.Work)
		o := p.Value
		p.Reply(Receipt{ID: fmt.Sprintf("o-%d", r.seq.Add(1)), Item: o.Item, Qty: o.Qty, Total: p.total})
	}
	return nil
}

// service is the running example: the stages and the HTTP handler.
type service struct {
	m       *stage.Manager
	handler http.Handler
}

func newService(ctx context.Context, timeout time.Duration) (*service, error) {
	reg := stage.NewRegistry()
	register(reg)
	cfg, err := stage.ParseConfig(config, configName)
	if err != nil {
		return nil, err
	}
	m, err := stage.NewFromConfig(cfg, reg, stage.Options{})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	front, ok := m.Stage("Validate")
	if !ok {
		return nil, errors.New("orders.yaml has no Validate stage")
	}
	api := nethttp.JSON[Order, Receipt](front.Sink())
	api.Timeout = timeout
	mux := http.NewServeMux()
	mux.Handle("POST /orders", api)
	return &service{m: m, handler: mux}, nil
}
