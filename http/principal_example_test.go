package http_test

import (
	"fmt"
	"net/netip"

	"github.com/sandstorm-go/sandstorm/http"
)

// A server behind a proxy on this host, and a client that forges the
// left of X-Forwarded-For: the principal is the hop the proxy appended.
func ExampleClientPolicy_Client() {
	trusted, err := http.ParseTrustedProxies([]string{"127.0.0.1", "10.0.0.0/8"})
	if err != nil {
		panic(err)
	}
	p := http.ClientPolicy{From: http.PrincipalFromHeader, TrustedProxies: trusted}
	var h http.Header
	h.Add("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.1.1")
	fmt.Println(p.Client(netip.MustParseAddr("127.0.0.1"), h))    // from the proxy
	fmt.Println(p.Client(netip.MustParseAddr("198.51.100.2"), h)) // straight from a client
	fmt.Println(p.ClassTrusted(netip.MustParseAddr("198.51.100.2")))
	// Output:
	// 203.0.113.7
	// 198.51.100.2
	// false
}

// A server whose clients are their addresses, and whose X-Class header
// only the proxies in 10.0.0.0/8 may set.
func ExampleServerConfig_clients() {
	trusted, err := http.ParseTrustedProxies([]string{"10.0.0.0/8"})
	if err != nil {
		panic(err)
	}
	cfg := http.ServerConfig{Clients: &http.ClientPolicy{TrustedProxies: trusted}}
	fmt.Println(cfg.Clients.Validate())
	// Output:
	// <nil>
}
