package http_test

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/http"
)

func prefixes(t testing.TB, list ...string) []netip.Prefix {
	t.Helper()
	p, err := http.ParseTrustedProxies(list)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseTrustedProxies(t *testing.T) {
	tests := []struct {
		in, want string // want "" means an error
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{" 127.0.0.1 ", "127.0.0.1/32"},
		{"::1", "::1/128"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
		{"10.0.0.0/33", ""},
		{"10.0.0/8", ""},
		{"localhost", ""},
		{"", ""},
		{"fe80::1%eth0", ""},
		{"::ffff:0.0.0.0/8", ""},
	}
	for _, tt := range tests {
		got, err := http.ParseTrustedProxy(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("ParseTrustedProxy(%q) = %v, want an error", tt.in, got)
		case tt.want != "" && (err != nil || got.String() != tt.want):
			t.Errorf("ParseTrustedProxy(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestClientFromHeader walks forwarding headers the way a proxy chain
// writes them, and the way a client forging them would.
func TestClientFromHeader(t *testing.T) {
	xff := http.ClientPolicy{From: http.PrincipalFromHeader,
		TrustedProxies: prefixes(t, "127.0.0.1/32", "10.0.0.0/8", "2001:db8:ffff::/48")}
	realIP := xff
	realIP.Header = "X-Real-IP"
	fwd := xff
	fwd.Header = "Forwarded"
	byAddr := xff
	byAddr.From = http.PrincipalFromAddr
	tests := []struct {
		name   string
		policy http.ClientPolicy
		peer   string
		header []string // name, value pairs
		want   string
	}{
		{"no header", xff, "127.0.0.1", nil, "127.0.0.1"},
		{"one hop", xff, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"untrusted peer's header ignored", xff, "192.0.2.1", []string{"X-Forwarded-For", "203.0.113.7"}, "192.0.2.1"},
		{"spoofed left-most entry", xff, "127.0.0.1", []string{"X-Forwarded-For", "1.2.3.4, 203.0.113.7"}, "203.0.113.7"},
		{"through internal proxies", xff, "127.0.0.1", []string{"X-Forwarded-For", "1.2.3.4, 203.0.113.7, 10.1.1.1,10.2.2.2"}, "203.0.113.7"},
		{"all hops trusted", xff, "127.0.0.1", []string{"X-Forwarded-For", "10.9.9.9, 10.1.1.1"}, "10.9.9.9"},
		{"several fields, last first", xff, "127.0.0.1", []string{"X-Forwarded-For", "1.2.3.4", "x-forwarded-for", "10.1.1.1"}, "1.2.3.4"},
		{"spoof in an earlier field", xff, "127.0.0.1", []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"port", xff, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7:5123"}, "203.0.113.7"},
		{"IPv6", xff, "127.0.0.1", []string{"X-Forwarded-For", "2001:db8::7"}, "2001:db8::7"},
		{"IPv6 bracketed with port", xff, "127.0.0.1", []string{"X-Forwarded-For", "[2001:db8::7]:443"}, "2001:db8::7"},
		{"IPv6 bracketed", xff, "127.0.0.1", []string{"X-Forwarded-For", "[2001:db8::7]"}, "2001:db8::7"},
		{"IPv6 zone dropped", xff, "127.0.0.1", []string{"X-Forwarded-For", "fe80::1%eth0"}, "fe80::1"},
		{"IPv4-mapped unmapped", xff, "127.0.0.1", []string{"X-Forwarded-For", "::ffff:203.0.113.7"}, "203.0.113.7"},
		{"IPv6 trusted proxy", xff, "2001:db8:ffff::1", []string{"X-Forwarded-For", "198.51.100.1, 2001:db8:ffff::2"}, "198.51.100.1"},
		{"IPv4-mapped peer", xff, "::ffff:127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7"}, "203.0.113.7"},
		{"malformed right-most", xff, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7, garbage"}, "127.0.0.1"},
		{"malformed behind a trusted hop", xff, "127.0.0.1", []string{"X-Forwarded-For", "unknown, 10.1.1.1"}, "10.1.1.1"},
		{"malformed left of the client", xff, "127.0.0.1", []string{"X-Forwarded-For", "<script>, 203.0.113.7"}, "203.0.113.7"},
		{"empty value", xff, "127.0.0.1", []string{"X-Forwarded-For", ""}, "127.0.0.1"},
		{"empty hop", xff, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7,"}, "127.0.0.1"},
		{"hostname", xff, "127.0.0.1", []string{"X-Forwarded-For", "evil.example"}, "127.0.0.1"},
		{"port out of range", xff, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7:99999"}, "127.0.0.1"},
		{"other header ignored", xff, "127.0.0.1", []string{"X-Real-IP", "203.0.113.7"}, "127.0.0.1"},
		{"X-Real-IP", realIP, "10.0.0.5", []string{"X-Real-IP", "203.0.113.7"}, "203.0.113.7"},
		{"X-Real-IP ignores XFF", realIP, "10.0.0.5", []string{"X-Forwarded-For", "203.0.113.7"}, "10.0.0.5"},
		{"Forwarded", fwd, "127.0.0.1", []string{"Forwarded", `for=1.2.3.4, for="[2001:db8::7]:80";proto=https`}, "2001:db8::7"},
		{"Forwarded by=, for= later", fwd, "127.0.0.1", []string{"Forwarded", `by=10.0.0.1;for=203.0.113.7`}, "203.0.113.7"},
		{"Forwarded obfuscated", fwd, "127.0.0.1", []string{"Forwarded", `for=_hidden`}, "127.0.0.1"},
		{"from addr ignores headers", byAddr, "127.0.0.1", []string{"X-Forwarded-For", "203.0.113.7"}, "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h http.Header
			for i := 0; i+1 < len(tt.header); i += 2 {
				h.Add(tt.header[i], tt.header[i+1])
			}
			got := tt.policy.Client(netip.MustParseAddr(tt.peer), h)
			if got.String() != tt.want {
				t.Errorf("Client(%s, %q) = %v, want %s", tt.peer, tt.header, got, tt.want)
			}
		})
	}
}

func TestClientPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    http.ClientPolicy
		ok   bool
	}{
		{"zero", http.ClientPolicy{}, true},
		{"header with proxies", http.ClientPolicy{From: http.PrincipalFromHeader, TrustedProxies: prefixes(t, "10.0.0.0/8")}, true},
		{"header without proxies", http.ClientPolicy{From: http.PrincipalFromHeader}, false},
		{"unknown source", http.ClientPolicy{From: "cookie"}, false},
		{"unknown class", http.ClientPolicy{Class: "everyone"}, false},
		{"bad header name", http.ClientPolicy{Header: "X Real IP"}, false},
		{"invalid prefix", http.ClientPolicy{TrustedProxies: []netip.Prefix{{}}}, false},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// FuzzClient checks that no header makes Client panic, and that its
// answer is always the peer, a hop of the header, and never a hop left of
// an untrusted one (which its sender could have forged).
func FuzzClient(f *testing.F) {
	for _, s := range []string{"", "203.0.113.7", "1.2.3.4, 203.0.113.7, 10.1.1.1", "[2001:db8::1]:80, ::ffff:10.0.0.1",
		"unknown, 10.0.0.1", ",,,", "fe80::1%eth0", "10.0.0.1:99999", `for="[::1]:1";by=x`} {
		f.Add(s, false)
		f.Add(s, true)
	}
	policy := http.ClientPolicy{From: http.PrincipalFromHeader, TrustedProxies: prefixes(f, "127.0.0.0/8", "10.0.0.0/8", "::1/128")}
	fwd := policy
	fwd.Header = "Forwarded"
	peer := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, v string, forwarded bool) {
		p, name := policy, "X-Forwarded-For"
		if forwarded {
			p, name = fwd, "Forwarded"
		}
		var h http.Header
		h.Add(name, v)
		got := p.Client(peer, h)
		if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("Client(%q) = %v", v, got)
		}
		if got == peer {
			return
		}
		// got must be the right-most untrusted hop, or a trusted hop with
		// only trusted hops to its right.
		hops := strings.Split(v, ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := http.ParseHop(afterFor(hops[i], forwarded))
			if !ok {
				continue
			}
			if a == got {
				return
			}
			if !p.Trusted(a) {
				t.Fatalf("Client(%q) = %v, left of the untrusted hop %v", v, got, a)
			}
		}
		t.Fatalf("Client(%q) = %v, not a hop of the header", v, got)
	})
}

func afterFor(hop string, forwarded bool) string {
	if !forwarded {
		return hop
	}
	for _, pair := range strings.Split(hop, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// dialFrom connects to addr from the loopback address local (Linux routes
// all of 127.0.0.0/8 to the loopback interface).
func dialFrom(t *testing.T, local, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	return c, bufio.NewReader(c)
}

// TestClientPolicyOverSockets connects from two loopback addresses, one a
// trusted proxy, and checks each request's principal and class as the
// application sees them.
func TestClientPolicyOverSockets(t *testing.T) {
	cfg := http.ServerConfig{Clients: &http.ClientPolicy{From: http.PrincipalFromHeader,
		TrustedProxies: prefixes(t, "127.0.0.2/32")}}
	f := startServer(t, cfg, func(req *http.Request) {
		p := req.Principal()
		body := fmt.Sprintf("%s class=%d", p.ID, enqueuepred.ClassOf(req))
		_ = http.Respond(req, http.OK("text/plain", []byte(body)))
	})
	tests := []struct {
		from, header, want string
	}{
		// An untrusted client is its address; its headers claim nothing.
		{"127.0.0.1", "", "127.0.0.1 class=0"},
		{"127.0.0.1", "X-Class: 5\r\n", "127.0.0.1 class=0"},
		{"127.0.0.1", "X-Class: not-a-number\r\n", "127.0.0.1 class=0"},
		{"127.0.0.1", "X-Forwarded-For: 203.0.113.7\r\nX-Class: 5\r\n", "127.0.0.1 class=0"},
		// A trusted proxy names the client and may set its class.
		{"127.0.0.2", "", "127.0.0.2 class=0"},
		{"127.0.0.2", "X-Class: 5\r\n", "127.0.0.2 class=5"},
		{"127.0.0.2", "X-Forwarded-For: 6.6.6.6, 203.0.113.7\r\nX-Class: 2\r\n", "203.0.113.7 class=2"},
	}
	conns := map[string]*bufio.Reader{}
	writers := map[string]net.Conn{}
	for _, tt := range tests {
		if conns[tt.from] == nil {
			writers[tt.from], conns[tt.from] = dialFrom(t, tt.from, f.addr)
		}
		fmt.Fprintf(writers[tt.from], "GET /p HTTP/1.1\r\nHost: x\r\n%s\r\n", tt.header)
		resp, body := readResponse(t, conns[tt.from], "GET")
		if resp.StatusCode != 200 || body != tt.want {
			t.Errorf("from %s with %q: %d %q, want %q", tt.from, tt.header, resp.StatusCode, body, tt.want)
		}
	}
}

// TestClientPolicyClassFromAny keeps the behaviour of servers without a
// policy for the class header, on request.
func TestClientPolicyClassFromAny(t *testing.T) {
	cfg := http.ServerConfig{Clients: &http.ClientPolicy{Class: http.ClassFromAny}}
	f := startServer(t, cfg, func(req *http.Request) {
		body := fmt.Sprintf("%s class=%d", req.Principal().ID, req.Class())
		_ = http.Respond(req, http.OK("text/plain", []byte(body)))
	})
	c, br := dialFrom(t, "127.0.0.1", f.addr)
	fmt.Fprintf(c, "GET /p HTTP/1.1\r\nHost: x\r\nX-Class: 3\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "127.0.0.1 class=3" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

func BenchmarkClient(b *testing.B) {
	p := http.ClientPolicy{From: http.PrincipalFromHeader, TrustedProxies: prefixes(b, "127.0.0.1/32", "10.0.0.0/8")}
	var h http.Header
	h.Add("Host", "example.com")
	h.Add("X-Forwarded-For", "1.2.3.4, 203.0.113.7, 10.1.1.1")
	peer := netip.MustParseAddr("127.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		if p.Client(peer, h).IsUnspecified() {
			b.Fatal("no client")
		}
	}
}
