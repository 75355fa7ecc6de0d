package haboob_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// principalConfig is a Haboob graph whose dynamic route /who/ answers
// with the principal and class its stage sees. Who's admission accounts
// per principal and decides per session: a principal's first request
// takes a token from a bucket of two (refilled once in 1000 s), and its
// later ones get the same answer for a minute. PRINCIPAL is replaced by
// HttpRecv's principal block.
const principalConfig = `
global:
  shutdown: 5s
  threadpool: {min: 1, max: 2}
  aio:
    eventLoops: 1
    sockets:
      http: {addr: "127.0.0.1:0"}
    file: {threadpool: {min: 1, max: 2}}
stages:
  HttpRecv:
    handler: haboob.HttpRecv
    args:
      routes: {/who/: Who}
      PRINCIPAL
  PageCache:
    handler: haboob.PageCache
  CacheMiss:
    handler: haboob.CacheMiss
  HttpSend:
    handler: haboob.HttpSend
  Who:
    handler: test.Who
    predicate:
      type: account
      of:
        type: session
        window: 1m
        of: {type: rate, rate: 0.001, depth: 2}
`

func startWho(t *testing.T, principal string) *site {
	t.Helper()
	return startWhoOpts(t, principal, haboob.Options{Root: t.TempDir()})
}

// startWhoOpts is startWho with Haboob's Options.
func startWhoOpts(t *testing.T, principal string, opts haboob.Options) *site {
	t.Helper()
	config := strings.Replace(principalConfig, "PRINCIPAL", principal, 1)
	return startSite(t, config, opts, func(r *stage.Registry) {
		r.Register("test.Who", func() stage.Handler {
			return stage.HandlerFunc(func(batch []sink.Event) error {
				for _, e := range batch {
					req := e.(*http.Request)
					body := fmt.Sprintf("%s class=%d", req.Principal().ID, enqueuepred.ClassOf(req))
					_ = http.Respond(req, http.OK("text/plain", []byte(body)))
				}
				return nil
			})
		})
	})
}

// client is one keep-alive connection from a loopback address.
type client struct {
	c  net.Conn
	br *bufio.Reader
}

// dialFrom connects to addr from local: Linux routes all of 127.0.0.0/8
// to the loopback interface, so 127.0.0.2 is a second client.
func dialFrom(t *testing.T, local, addr string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &client{c: c, br: bufio.NewReader(c)}
}

// get sends GET path with the header lines and returns the status and body.
func (c *client) get(t *testing.T, path, header string) (int, string) {
	t.Helper()
	fmt.Fprintf(c.c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, header)
	resp, err := nethttp.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// inspect returns the values the named stage's predicates report.
func inspect(t *testing.T, m *stage.Manager, name string) map[string]float64 {
	t.Helper()
	st, ok := m.Stage(name)
	if !ok {
		t.Fatalf("no stage %s", name)
	}
	out := map[string]float64{}
	sink.Walk(st.Sink().Predicate(), func(p sink.Predicate) {
		if in, ok := p.(enqueuepred.Inspector); ok {
			in.Inspect(func(k string, v float64) {
				if _, seen := out[k]; !seen {
					out[k] = v
				}
			})
		}
	})
	return out
}

// TestPrincipalsAdmittedSeparately shows, over loopback sockets, that
// session and account act per principal: two principals each get a
// session while the bucket has tokens, and one of them sending many
// requests neither starves the other nor is charged to it; a third
// principal, arriving once the bucket is empty, is turned away. Before
// principals, every request was "anonymous", decided by the bucket
// alone: the third request of anyone was refused.
func TestPrincipalsAdmittedSeparately(t *testing.T) {
	tests := []struct {
		name      string
		principal string
		// from and header of principals A, B and C
		from   [3]string
		header [3]string
		id     [3]string
	}{
		{
			name:      "client address",
			principal: "",
			from:      [3]string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
			id:        [3]string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
		},
		{
			name:      "trusted proxy header",
			principal: "principal: {from: header, trustedProxies: [127.0.0.0/8]}",
			from:      [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"},
			header: [3]string{"X-Forwarded-For: 198.51.100.1\r\n",
				"X-Forwarded-For: 198.51.100.2\r\n",
				"X-Forwarded-For: 198.51.100.1, 203.0.113.3\r\n"},
			id: [3]string{"198.51.100.1", "198.51.100.2", "203.0.113.3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startWho(t, tt.principal)
			var cs [3]*client
			for i := range cs {
				cs[i] = dialFrom(t, tt.from[i], s.addr)
			}
			get := func(i int) (int, string) { return cs[i].get(t, "/who/x", tt.header[i]) }
			const a, b, c = 0, 1, 2
			for _, i := range []int{a, b} {
				if st, body := get(i); st != 200 || body != tt.id[i]+" class=0" {
					t.Fatalf("principal %s's first request: %d %q", tt.id[i], st, body)
				}
			}
			// A floods: its session stays admitted though the bucket is empty.
			for range 20 {
				if st, _ := get(a); st != 200 {
					t.Fatalf("principal %s, in session: %d", tt.id[a], st)
				}
			}
			// B is not starved by A.
			for range 3 {
				if st, body := get(b); st != 200 || body != tt.id[b]+" class=0" {
					t.Fatalf("principal %s after %s's flood: %d %q", tt.id[b], tt.id[a], st, body)
				}
			}
			// C comes once the bucket is empty: refused, and stays refused.
			for range 2 {
				if st, _ := get(c); st != 503 {
					t.Fatalf("principal %s: %d, want 503", tt.id[c], st)
				}
			}
			// The account tells them apart.
			v := inspect(t, s.m, "Who")
			for i, want := range [][2]float64{{21, 0}, {4, 0}, {0, 2}} {
				key := "principal." + strings.ReplaceAll(tt.id[i], ".", "_") + "."
				if v[key+"admitted"] != want[0] || v[key+"rejected"] != want[1] {
					t.Errorf("%s admitted %v rejected %v, want %v", tt.id[i], v[key+"admitted"], v[key+"rejected"], want)
				}
			}
			if t.Failed() {
				t.Logf("predicate values: %v", v)
			}
		})
	}
}

// TestClassOnlyFromTrustedProxies: X-Class from a client that is not a
// trusted proxy is ignored (class 0), from a trusted proxy honoured; with
// class: any, anyone's counts again.
func TestClassOnlyFromTrustedProxies(t *testing.T) {
	tests := []struct {
		principal, from, header, want string
	}{
		{"", "127.0.0.1", "X-Class: 7\r\n", "127.0.0.1 class=0"},
		{"principal: {trustedProxies: [127.0.0.2]}", "127.0.0.1", "X-Class: 7\r\n", "127.0.0.1 class=0"},
		{"principal: {trustedProxies: [127.0.0.2]}", "127.0.0.2", "X-Class: 7\r\n", "127.0.0.2 class=7"},
		{"principal: {from: header, trustedProxies: [127.0.0.2]}", "127.0.0.1", "X-Forwarded-For: 203.0.113.9\r\nX-Class: 7\r\n", "127.0.0.1 class=0"},
		{"principal: {from: header, trustedProxies: [127.0.0.2]}", "127.0.0.2", "X-Forwarded-For: 203.0.113.9\r\nX-Class: 7\r\n", "203.0.113.9 class=7"},
		{"principal: {from: header, header: X-Real-IP, trustedProxies: [127.0.0.2]}", "127.0.0.2", "X-Real-IP: 203.0.113.9\r\nX-Class: 1\r\n", "203.0.113.9 class=1"},
		{"principal: {class: any}", "127.0.0.1", "X-Class: 7\r\n", "127.0.0.1 class=7"},
		{"principal: {class: none, trustedProxies: [127.0.0.0/8]}", "127.0.0.1", "X-Class: 7\r\n", "127.0.0.1 class=0"},
	}
	for _, tt := range tests {
		t.Run(tt.principal+" from "+tt.from, func(t *testing.T) {
			s := startWho(t, tt.principal)
			if st, body := dialFrom(t, tt.from, s.addr).get(t, "/who/x", tt.header); st != 200 || body != tt.want {
				t.Fatalf("got %d %q, want %q", st, body, tt.want)
			}
		})
	}
}

func TestPrincipalConfigErrors(t *testing.T) {
	tests := []struct {
		name, principal, want string
	}{
		{"bad CIDR", "principal: {trustedProxies: [127.0.0.1/32, 10.0.0.0/33]}", `line 15: stages.HttpRecv.args.principal.trustedProxies[1]: "10.0.0.0/33" is not a CIDR prefix`},
		{"not an address", "principal: {trustedProxies: [proxy.local]}", `"proxy.local" is not a CIDR prefix`},
		{"unknown key", "principal: {trustedProxy: [127.0.0.1]}", "trustedProxy"},
		{"unknown source", "principal: {from: cookie}", "principal.from: must be addr or header"},
		{"header without proxies", "principal: {from: header}", "principal.from: from: header needs trustedProxies"},
		{"bad class", "principal: {class: all}", "principal.class: must be trusted, any or none"},
		{"bad header", "principal: {header: 'X Real IP', trustedProxies: [10.0.0.0/8]}", "principal.header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hb := haboob.New(haboob.Options{Root: t.TempDir()})
			reg := stage.NewRegistry()
			hb.Register(reg)
			reg.Register("test.Who", func() stage.Handler { return stage.HandlerFunc(func([]sink.Event) error { return nil }) })
			config := strings.Replace(principalConfig, "PRINCIPAL", tt.principal, 1)
			m, err := stage.Parse([]byte(config), reg)
			if err == nil {
				err = m.Start(context.Background())
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = m.Shutdown(ctx)
					cancel()
				}
			}
			_ = hb.Close()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestStatsBehindTrustedProxy: the loopback-only statistics page judges
// the client a trusted proxy on this host names, not the proxy itself.
func TestStatsBehindTrustedProxy(t *testing.T) {
	s := startWho(t, "principal: {from: header, trustedProxies: [127.0.0.1]}")
	tests := []struct {
		from, header string
		status       int
	}{
		{"127.0.0.1", "", 200},
		{"127.0.0.1", "X-Forwarded-For: 127.0.0.5\r\n", 200},
		{"127.0.0.1", "X-Forwarded-For: 203.0.113.9\r\n", 403},
		{"127.0.0.1", "X-Forwarded-For: 127.0.0.5, 203.0.113.9\r\n", 403},
		{"127.0.0.2", "X-Forwarded-For: 203.0.113.9\r\n", 200}, // untrusted: its own (loopback) address
	}
	for _, tt := range tests {
		if st, _ := dialFrom(t, tt.from, s.addr).get(t, "/stats", tt.header); st != tt.status {
			t.Errorf("/stats from %s with %q: %d, want %d", tt.from, tt.header, st, tt.status)
		}
	}
}

// TestOptionsPrincipal shows Options.Principal replacing the client
// address a request gets from the principal block when it says ok, and
// leaving it when it does not: two sessions from one address are two
// principals to the account and session predicates, and a request without
// a session is its address.
func TestOptionsPrincipal(t *testing.T) {
	s := startWhoOpts(t, "principal: {class: any}", haboob.Options{Root: t.TempDir(),
		Principal: func(r *http.Request) (any, bool) {
			if id := r.Header.Get("X-Session"); id != "" {
				return enqueuepred.Principal{ID: "s-" + id}, true
			}
			return nil, false
		}})
	c := dialFrom(t, "127.0.0.1", s.addr)
	for i, step := range []struct {
		header string
		status int
		body   string
	}{
		{"X-Session: a\r\nX-Class: 1\r\n", 200, "s-a class=1"}, // token 1
		{"", 200, "127.0.0.1 class=0"},                         // the address: token 2
		{"X-Session: b\r\n", 503, ""},                          // a third principal
		{"X-Session: a\r\n", 200, "s-a class=0"},               // a's session
		{"X-Session: b\r\n", 503, ""},
	} {
		st, body := c.get(t, "/who/x", step.header)
		if st != step.status || step.status == 200 && body != step.body {
			t.Errorf("request %d: %d %q, want %d %q", i, st, body, step.status, step.body)
		}
	}
	v := inspect(t, s.m, "Who")
	for id, want := range map[string][2]float64{"s-a": {2, 0}, "127_0_0_1": {1, 0}, "s-b": {0, 2}} {
		key := "principal." + id + "."
		if v[key+"admitted"] != want[0] || v[key+"rejected"] != want[1] {
			t.Errorf("%s admitted %v rejected %v, want %v", id, v[key+"admitted"], v[key+"rejected"], want)
		}
	}
}
