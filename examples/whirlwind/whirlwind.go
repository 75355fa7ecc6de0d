package whirlwind

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Config is the stage graph in YAML.
//
//go:embed whirlwind.yaml
var Config []byte

// Quality of a file response.
type Quality int

// Qualities.
const (
	Full Quality = iota // the media-rich version
	Low                 // the less resource-intensive version
)

func (q Quality) String() string {
	if q == Low {
		return "low quality"
	}
	return "full quality"
}

// Costs of the two qualities for the file handler group's cost predicate.
const (
	FullCost = 10
	LowCost  = 1
)

// Role of the user behind a session; it is the principal's priority.
type Role int

// Roles, least important first (Whirlwind §IV: administrators get the
// highest priority, unauthenticated users the lowest).
const (
	Anonymous Role = iota
	User
	Admin
)

// Request is an HTTP request read from a connection.
type Request struct {
	Conn    string // connection id: SocketConnection and HttpConnection are keyed by it
	ID      int    // unique request id
	Session string // the principal
	Role    Role
	Path    string
	Last    bool // the client closes the connection after this request

	seq int // position on its connection, set by HttpConnection
}

// Key implements stage.Keyed: a connection is a sequential process.
func (r Request) Key() string { return r.Conn }

// Principal implements enqueuepred.Principaled.
func (r Request) Principal() enqueuepred.Principal {
	return enqueuepred.Principal{ID: r.Session, Class: int(r.Role), Priority: int(r.Role)}
}

// Response is an HTTP response on its way to the client.
type Response struct {
	Conn    string
	ID      int
	Status  int
	Quality Quality
	Bytes   int
	Close   bool // the connection closes after it

	seq int
}

// Key implements stage.Keyed.
func (r Response) Key() string { return r.Conn }

var statusText = map[int]string{200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}

func (r Response) String() string {
	s := fmt.Sprintf("request %d: %d %s", r.ID, r.Status, statusText[r.Status])
	if r.Status == 200 {
		s += fmt.Sprintf(" (%v, %d bytes)", r.Quality, r.Bytes)
	}
	if r.Close {
		s += " (connection closed)"
	}
	return s
}

// FileRequest asks the file handler group for a file at a quality.
type FileRequest struct {
	Request
	Quality Quality
}

// Cost implements enqueuepred.Costed.
func (f FileRequest) Cost() float64 {
	if f.Quality == Low {
		return LowCost
	}
	return FullCost
}

// Size implements stage.Sized for the shortest-first scheduler.
func (f FileRequest) Size() int { return int(f.Cost()) }

// read asks AsyncFile for a file: keyed by path, one read per file at a
// time.
type read struct{ req FileRequest }

func (r read) Key() string                      { return r.req.Path }
func (r read) Principal() enqueuepred.Principal { return r.req.Principal() }

// fileData is AsyncFile's answer to the file handler. It must never be
// refused (the work is done) and costs the handler nothing more.
type fileData struct {
	req   FileRequest
	size  int
	found bool
}

func (d fileData) Principal() enqueuepred.Principal { return d.req.Principal() }
func (fileData) NonRejectable() bool                { return true }
func (fileData) Cost() float64                      { return 0 }

// Outcome of the Dispatcher's admission attempt for a file request.
type Outcome string

// Outcomes.
const (
	AdmittedFull Outcome = "full quality admitted"
	AdmittedLow  Outcome = "full quality rejected, low quality admitted"
	Rejected     Outcome = "both qualities rejected: 503"
	Failed       Outcome = "file handlers failed: 500"
)

// Decision records what the Dispatcher did with a file request (an access
// log for the simulation).
type Decision struct {
	ID      int
	Outcome Outcome
}

func (d Decision) String() string { return fmt.Sprintf("request %d: %s", d.ID, d.Outcome) }

// PoisonPath is a file whose read crashes AsyncFile, to show containment
// and supervision.
const PoisonPath = "/files/poison"

// Server is the simulated server's environment: its files, the client end
// of its connections, and a throttle on the file handlers to simulate
// load.
type Server struct {
	files     map[string]int // path → size in bytes
	cpu       throttle
	responses chan Response
	decisions chan Decision
	lost      atomic.Uint64
	discarded atomic.Uint64
}

// New returns a server serving files (path → size in bytes).
func New(files map[string]int) *Server {
	return &Server{files: files, responses: make(chan Response, 4096), decisions: make(chan Decision, 4096)}
}

// Register adds the server's handlers to r under the names Config uses.
func (s *Server) Register(r *stage.Registry) {
	r.Register("whirlwind.SocketConnection", func() stage.Handler { return &socketConnection{srv: s} })
	r.Register("whirlwind.HttpConnection", func() stage.Handler { return &httpConnection{srv: s} })
	r.Register("whirlwind.Dispatcher", func() stage.Handler { return &dispatcher{srv: s} })
	r.Register("whirlwind.FileHandler", func() stage.Handler { return &fileHandler{srv: s} })
	r.Register("whirlwind.AsyncFile", func() stage.Handler { return &asyncFile{srv: s} })
}

// Load builds the stage graph from Config with the server's handlers (not
// started).
func (s *Server) Load() (*stage.Manager, error) {
	reg := stage.NewRegistry()
	s.Register(reg)
	return stage.Parse(Config, reg)
}

// Send delivers a request from a client to its connection.
func (s *Server) Send(m *stage.Manager, r Request) error {
	st, ok := m.Stage("SocketConnection")
	if !ok {
		return errors.New("whirlwind: no SocketConnection stage")
	}
	return st.Sink().Enqueue(r)
}

// Responses delivers the responses the clients receive.
func (s *Server) Responses() <-chan Response { return s.responses }

// Decisions delivers the Dispatcher's decisions on file requests, in the
// order it took them.
func (s *Server) Decisions() <-chan Decision { return s.decisions }

// Lost counts responses and decisions dropped because nobody read them.
func (s *Server) Lost() uint64 { return s.lost.Load() }

// Discarded counts requests sent on a closed connection and responses to
// requests after the one that closed it: a real server would have closed
// the socket under them.
func (s *Server) Discarded() uint64 { return s.discarded.Load() }

// Hold saturates the file handlers: their batches wait until Release, so
// their queue (and its estimated cost) builds up.
func (s *Server) Hold() { s.cpu.hold() }

// Release lets the file handlers go on.
func (s *Server) Release() { s.cpu.release() }

func (s *Server) decide(d Decision) {
	select {
	case s.decisions <- d:
	default:
		s.lost.Add(1)
	}
}

func (s *Server) deliver(r Response) {
	select {
	case s.responses <- r:
	default:
		s.lost.Add(1)
	}
}

type throttle struct {
	mu   sync.Mutex
	held chan struct{}
}

func (t *throttle) hold() {
	t.mu.Lock()
	if t.held == nil {
		t.held = make(chan struct{})
	}
	t.mu.Unlock()
}

func (t *throttle) release() {
	t.mu.Lock()
	if t.held != nil {
		close(t.held)
		t.held = nil
	}
	t.mu.Unlock()
}

func (t *throttle) wait() {
	t.mu.Lock()
	ch := t.held
	t.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// ---- SocketConnection: the socket of each connection ----

type socketConnection struct {
	srv  *Server
	http sink.Sink
}

func (h *socketConnection) Init(c *stage.Context) (err error) {
	h.http, err = c.Sink("HttpConnection")
	return err
}

func (h *socketConnection) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch ev := e.(type) {
		case Request: // read from the socket
			if err := h.http.Enqueue(ev); err != nil {
				h.srv.deliver(Response{Conn: ev.Conn, ID: ev.ID, Status: 503, Close: true})
			}
		case Response: // written to the socket
			h.srv.deliver(ev)
		default:
			return fmt.Errorf("socket connection: unexpected %T", e)
		}
	}
	return nil
}

// ---- HttpConnection: protocol state of each connection ----

// connState is one connection's HTTP state. The stage is keyed by
// connection, so only one event of a connection is handled at a time: the
// state itself needs no lock, only the map holding all of them.
type connState struct {
	nextSeq int              // sequence number of the next request
	nextOut int              // sequence number of the next response to send
	pending map[int]Response // responses waiting for earlier ones
	last    bool             // the client sent its last request
	closed  bool             // a response closed the connection
}

type httpConnection struct {
	srv        *Server
	dispatcher sink.Sink
	socket     sink.Sink

	mu    sync.Mutex
	conns map[string]*connState
}

func (h *httpConnection) Init(c *stage.Context) (err error) {
	h.conns = map[string]*connState{}
	if h.dispatcher, err = c.Sink("Dispatcher"); err != nil {
		return err
	}
	h.socket, err = c.Sink("SocketConnection")
	return err
}

// state returns a connection's state, creating it for a new connection.
func (h *httpConnection) state(conn string, create bool) *connState {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.conns[conn]
	if st == nil && create {
		st = &connState{pending: map[int]Response{}}
		h.conns[conn] = st
	}
	return st
}

// done forgets a connection once the client has sent its last request
// and every request has been answered. A connection the server closed is
// remembered until then, so that requests the client had already sent on
// it are discarded.
func (h *httpConnection) done(conn string, st *connState) {
	if st.last && st.nextOut == st.nextSeq {
		h.mu.Lock()
		delete(h.conns, conn)
		h.mu.Unlock()
	}
}

func (h *httpConnection) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		switch ev := e.(type) {
		case Request:
			st := h.state(ev.Conn, true)
			if st.last || st.closed {
				h.srv.discarded.Add(1) // sent after the connection closed
				st.last = st.last || ev.Last
				h.done(ev.Conn, st)
				continue
			}
			ev.seq = st.nextSeq
			st.nextSeq++
			st.last = ev.Last
			if err := h.dispatcher.Enqueue(ev); err != nil {
				h.respond(st, Response{Conn: ev.Conn, ID: ev.ID, Status: 503, Close: true, seq: ev.seq})
			}
		case Response:
			st := h.state(ev.Conn, false)
			if st == nil {
				h.srv.discarded.Add(1) // a late duplicate answer
				continue
			}
			h.respond(st, ev)
		default:
			return fmt.Errorf("http connection: unexpected %T", e)
		}
	}
	return nil
}

// respond sends r once every earlier response on its connection is sent
// (HTTP/1.1 pipelining). Answers after the connection closed, or a second
// answer to a request, are discarded.
func (h *httpConnection) respond(st *connState, r Response) {
	if _, dup := st.pending[r.seq]; dup || r.seq < st.nextOut {
		h.srv.discarded.Add(1)
		return
	}
	st.pending[r.seq] = r
	for {
		next, ok := st.pending[st.nextOut]
		if !ok {
			break
		}
		delete(st.pending, st.nextOut)
		st.nextOut++
		if st.closed {
			h.srv.discarded.Add(1)
			continue
		}
		if err := h.socket.Enqueue(next); err != nil {
			h.srv.lost.Add(1)
		}
		st.closed = next.Close
	}
	h.done(r.Conn, st)
}

// ---- Dispatcher: routes requests, degrades, answers 503 ----

type dispatcher struct {
	srv     *Server
	files   sink.Sink
	http    sink.Sink
	cancels []func()
}

func (d *dispatcher) Init(c *stage.Context) (err error) {
	if d.files, err = c.Sink("FileHandler"); err != nil {
		return err
	}
	if d.http, err = c.Sink("HttpConnection"); err != nil {
		return err
	}
	// Monitor the file stages: the requests of a failed batch get a 500
	// while a supervisor restarts the stage.
	for _, name := range []string{"FileHandler", "AsyncFile"} {
		cancel, err := c.Manager().Monitor(name, c.Stage().Sink())
		if err != nil {
			return err
		}
		d.cancels = append(d.cancels, cancel)
	}
	return nil
}

// Destroy stops the monitoring, so that a restarted dispatcher does not
// monitor twice.
func (d *dispatcher) Destroy() error {
	for _, cancel := range d.cancels {
		cancel()
	}
	return nil
}

func (d *dispatcher) HandleEvents(batch []sink.Event) error {
	for _, e := range batch {
		var err error
		switch ev := e.(type) {
		case Request:
			err = d.route(ev)
		case stage.StageFailed:
			err = d.failed(ev)
		case stage.StageRestarted, stage.StageTerminated:
		default:
			err = fmt.Errorf("dispatcher: unexpected %T", e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *dispatcher) route(r Request) error {
	if !strings.HasPrefix(r.Path, "/files/") {
		return d.reply(r, Response{Status: 404})
	}
	// Fig. 1(b): try the media-rich version, then the cheaper one.
	for _, q := range []Quality{Full, Low} {
		err := d.files.Enqueue(FileRequest{Request: r, Quality: q})
		if err == nil {
			outcome := AdmittedFull
			if q == Low {
				outcome = AdmittedLow
			}
			d.srv.decide(Decision{ID: r.ID, Outcome: outcome})
			return nil
		}
		if !errors.Is(err, sink.ErrRejected) {
			return err
		}
	}
	d.srv.decide(Decision{ID: r.ID, Outcome: Rejected})
	return d.reply(r, Response{Status: 503, Close: true})
}

// failed answers 500 for every request of a failure of the file stages:
// the requests they named as failed, or every request of a batch that
// failed whole (a panic).
func (d *dispatcher) failed(f stage.StageFailed) error {
	for _, e := range f.Events {
		var fr FileRequest
		switch ev := e.(type) {
		case FileRequest:
			fr = ev
		case read:
			fr = ev.req
		case fileData:
			fr = ev.req
		default:
			continue
		}
		d.srv.decide(Decision{ID: fr.ID, Outcome: Failed})
		if err := d.reply(fr.Request, Response{Status: 500}); err != nil {
			return err
		}
	}
	return nil
}

func (d *dispatcher) reply(r Request, resp Response) error {
	resp.Conn, resp.ID, resp.seq = r.Conn, r.ID, r.seq
	return d.http.Enqueue(resp)
}

// ---- FileHandler: the file handler group ----

type fileHandler struct {
	srv  *Server
	disk sink.Sink
	http sink.Sink
}

func (h *fileHandler) Init(c *stage.Context) (err error) {
	if h.disk, err = c.Sink("AsyncFile"); err != nil {
		return err
	}
	h.http, err = c.Sink("HttpConnection")
	return err
}

// HandleEvents names each event it could not pass on (stage.FailEvent) and
// goes on with the others, so that the Dispatcher answers 500 for exactly
// those requests.
func (h *fileHandler) HandleEvents(batch []sink.Event) error {
	h.srv.cpu.wait() // a saturated machine, in the simulation
	var errs []error
	for i, e := range batch {
		if err := h.handle(e); err != nil {
			errs = append(errs, stage.FailEvent(i, err))
		}
	}
	return errors.Join(errs...)
}

func (h *fileHandler) handle(e sink.Event) error {
	switch ev := e.(type) {
	case FileRequest:
		return h.disk.Enqueue(read{req: ev})
	case fileData:
		resp := Response{Conn: ev.req.Conn, ID: ev.req.ID, seq: ev.req.seq, Status: 404}
		if ev.found {
			resp.Status, resp.Quality, resp.Bytes = 200, ev.req.Quality, ev.size
			if ev.req.Quality == Low {
				resp.Bytes = ev.size / 4
			}
		}
		return h.http.Enqueue(resp)
	}
	return fmt.Errorf("file handler: unexpected %T", e)
}

// ---- AsyncFile: the disk ----

type asyncFile struct {
	srv   *Server
	files sink.Sink
}

func (h *asyncFile) Init(c *stage.Context) (err error) {
	h.files, err = c.Sink("FileHandler")
	return err
}

// HandleEvents names each read it could not pass on (stage.FailEvent). A
// panic fails its whole batch, which is why AsyncFile runs batches of one.
func (h *asyncFile) HandleEvents(batch []sink.Event) error {
	var errs []error
	for i, e := range batch {
		r, ok := e.(read)
		if !ok {
			errs = append(errs, stage.FailEvent(i, fmt.Errorf("async file: unexpected %T", e)))
			continue
		}
		if r.req.Path == PoisonPath {
			panic("async file: corrupt file system block")
		}
		size, found := h.srv.files[r.req.Path]
		if err := h.files.Enqueue(fileData{req: r.req, size: size, found: found}); err != nil {
			errs = append(errs, stage.FailEvent(i, err))
		}
	}
	return errors.Join(errs...)
}
