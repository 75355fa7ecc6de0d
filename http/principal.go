package http

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrClientPolicy: a ClientPolicy that cannot be applied (an unknown
// source or class mode, a header mode without a trusted proxy).
var ErrClientPolicy = errors.New("http: bad client policy")

// PrincipalSource says where ClientPolicy takes a request's principal from.
type PrincipalSource string

const (
	// PrincipalFromAddr: the principal is the peer's IP address (without
	// port). The default.
	PrincipalFromAddr PrincipalSource = "addr"
	// PrincipalFromHeader: when the peer is a trusted proxy, the principal
	// is the client address the proxy reports in ClientPolicy.Header;
	// otherwise it is the peer's address, as with PrincipalFromAddr.
	PrincipalFromHeader PrincipalSource = "header"
)

// ClassTrust says from whom the class header (ServerConfig.ClassHeader,
// default X-Class) is believed.
type ClassTrust string

const (
	// ClassFromTrusted: the class header is honoured only on connections
	// from a trusted proxy; other clients get class 0 whatever they send
	// (the header is then not even parsed). The default.
	ClassFromTrusted ClassTrust = "trusted"
	// ClassFromAny: every client may claim a class (the behaviour of a
	// server without a ClientPolicy).
	ClassFromAny ClassTrust = "any"
	// ClassFromNone: the header is ignored from everyone; a server (or a
	// ServerConfig.Principal function) may still SetClass.
	ClassFromNone ClassTrust = "none"
)

// DefaultClientHeader is the header a trusted proxy reports the client in
// when ClientPolicy.Header is empty.
const DefaultClientHeader = "X-Forwarded-For"

// ClientPolicy says who a request's client is and which of its claims a
// server believes (ServerConfig.Clients): its principal (Request.Principal,
// for the account, session and principal-ordering admission of package
// enqueuepred) and whether its class header counts.
//
// A peer is trusted when its address is in TrustedProxies. Only a trusted
// peer's headers are believed: the client header when From is
// PrincipalFromHeader, and the class header when Class is
// ClassFromTrusted. An untrusted peer is its own principal and has class 0.
//
// The zero value takes the principal from the peer's address and believes
// no one's class header. It does not authenticate anyone: an address is an
// identity only as far as the network routes it.
type ClientPolicy struct {
	// From is where the principal comes from (default PrincipalFromAddr).
	From PrincipalSource
	// Header is the header a trusted proxy names the client in (default
	// X-Forwarded-For). It is read as a comma-separated list of hops, each
	// proxy appending the address it received from, as X-Forwarded-For
	// and X-Real-IP are; "Forwarded" (RFC 7239) is read by its for=
	// parameters.
	Header string
	// TrustedProxies are the peers whose headers are believed.
	TrustedProxies []netip.Prefix
	// Class is who may set the class header (default ClassFromTrusted).
	Class ClassTrust
}

func (p ClientPolicy) withDefaults() ClientPolicy {
	if p.From == "" {
		p.From = PrincipalFromAddr
	}
	if p.Header == "" {
		p.Header = DefaultClientHeader
	}
	if p.Class == "" {
		p.Class = ClassFromTrusted
	}
	return p
}

// Validate reports a policy that cannot be applied, wrapping
// ErrClientPolicy.
func (p ClientPolicy) Validate() error {
	p = p.withDefaults()
	switch p.From {
	case PrincipalFromAddr, PrincipalFromHeader:
	default:
		return fmt.Errorf("%w: principal source %q is not addr or header", ErrClientPolicy, p.From)
	}
	switch p.Class {
	case ClassFromTrusted, ClassFromAny, ClassFromNone:
	default:
		return fmt.Errorf("%w: class %q is not trusted, any or none", ErrClientPolicy, p.Class)
	}
	for _, pf := range p.TrustedProxies {
		if !pf.IsValid() {
			return fmt.Errorf("%w: invalid trusted proxy prefix", ErrClientPolicy)
		}
	}
	if p.From == PrincipalFromHeader && len(p.TrustedProxies) == 0 {
		return fmt.Errorf("%w: a principal from %s needs trusted proxies (nobody's header would be believed)", ErrClientPolicy, p.Header)
	}
	if !isToken(p.Header) {
		return fmt.Errorf("%w: %q is not a header name", ErrClientPolicy, p.Header)
	}
	return nil
}

// ParseTrustedProxies parses CIDR prefixes ("10.0.0.0/8", "::1/128") or
// single addresses ("127.0.0.1", taken as /32 or /128), as a
// configuration gives them. The error names the entry that is neither.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		pf, err := ParseTrustedProxy(s)
		if err != nil {
			return nil, err
		}
		out = append(out, pf)
	}
	return out, nil
}

// ParseTrustedProxy parses one CIDR prefix or address (see
// ParseTrustedProxies). The prefix is masked ("10.1.2.3/8" is 10.0.0.0/8).
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %q is not a CIDR prefix", ErrClientPolicy, s)
		}
		if pf.Addr().Is4In6() {
			// ::ffff:10.0.0.0/104 means 10.0.0.0/8: peers are unmapped.
			if pf.Bits() < 96 {
				return netip.Prefix{}, fmt.Errorf("%w: %q is not a CIDR prefix of IPv4-mapped addresses", ErrClientPolicy, s)
			}
			pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-96)
		}
		return pf.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%w: %q is not a CIDR prefix or an address", ErrClientPolicy, s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Trusted reports whether peer is a trusted proxy.
func (p *ClientPolicy) Trusted(peer netip.Addr) bool {
	peer = peer.Unmap().WithZone("")
	for _, pf := range p.TrustedProxies {
		if pf.Contains(peer) {
			return true
		}
	}
	return false
}

// ClassTrusted reports whether the class header of requests from peer
// counts.
func (p *ClientPolicy) ClassTrusted(peer netip.Addr) bool {
	switch p.Class {
	case ClassFromAny:
		return true
	case ClassFromNone:
		return false
	}
	return p.Trusted(peer)
}

// Client returns the address of the client a request from peer with header
// h comes from: peer itself unless From is PrincipalFromHeader and peer is
// a trusted proxy. Then the hops of the header are walked from the right
// (the one the trusted peer appended) to the left, past the trusted
// proxies; the first untrusted hop is the client. Entries to its left
// were written by the client or by proxies nobody trusts, so a client
// cannot choose its identity by sending a header of its own. If every hop
// is trusted, the left-most is the client. A hop that is not an address
// (a port is allowed, "unknown" and obfuscated names are not) stops the
// walk: the client is the last address known, the trusted hop to its
// right (peer itself when the header is absent or its right-most hop is
// malformed).
func (p *ClientPolicy) Client(peer netip.Addr, h Header) netip.Addr {
	peer = peer.Unmap().WithZone("")
	if p.From != PrincipalFromHeader || !p.Trusted(peer) {
		return peer
	}
	name := p.Header
	if name == "" {
		name = DefaultClientHeader
	}
	forwarded := equalFold(name, "Forwarded")
	last := peer
	// Fields of the same name are one comma-separated list, in order
	// (RFC 9110 §5.3): walk the last field first.
	for i := len(h) - 1; i >= 0; i-- {
		if !equalFold(h[i].Name, name) {
			continue
		}
		v := h[i].Value
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				hop, v = v, ""
			}
			if forwarded {
				hop = forwardedFor(hop)
			}
			a, ok := ParseHop(hop)
			if !ok {
				return last
			}
			if !p.Trusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// forwardedFor returns the for= parameter of one element of a Forwarded
// field (RFC 7239), unquoted; "" if it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && equalFold(k, "for") {
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// ParseHop parses one hop of a forwarding header: an IPv4 or IPv6
// address, optionally with a port ("192.0.2.1:5000", "[2001:db8::1]:443")
// or in brackets ("[2001:db8::1]"), surrounded by optional spaces.
// IPv4-mapped IPv6 addresses are unmapped and zones dropped, so that a
// client has one identity however a proxy writes it.
func ParseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.Unmap().WithZone(""), true
		}
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// peerAddr returns the IP address of a connection's remote address (the
// zero Addr for a non-IP address).
func peerAddr(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
