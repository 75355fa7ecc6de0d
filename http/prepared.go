package http

// PreparedHeader is a Header checked and formatted once, for fields sent
// unchanged in many responses (a cached file's Content-Type, validators
// and Accept-Ranges). A Response whose Prepared was made from its very
// Header has its fields copied as formatted instead of looked up, checked
// and neutralized again on every response: the same bytes on the wire,
// less work per response. It is read-only and safe to share between
// goroutines; so must the Header it was made from be, once prepared.
type PreparedHeader struct {
	fields Header
	wire   []byte // the fields as AppendHeader writes them
	date   bool   // fields has Date
	server bool   // fields has Server
	close  bool   // fields has "Connection: close"
}

// PrepareHeader formats h once. Keep using h as the Response's Header
// (HTTP/2, access logs and handlers read it): Response.Prepared is used
// only while Header is the same slice (same first field, same length).
func PrepareHeader(h Header) *PreparedHeader {
	p := &PreparedHeader{
		fields: h,
		date:   h.Has("Date"),
		server: h.Has("Server"),
		close:  hasToken(h.Get("Connection"), "close"),
	}
	for _, f := range h {
		if !framingField(f.Name) {
			p.wire = appendField(p.wire, f.Name, f.Value)
		}
	}
	return p
}

// Header returns the fields p was made from.
func (p *PreparedHeader) Header() Header { return p.fields }

// prepared returns r.Prepared if it was made from r.Header, else nil.
func (r *Response) prepared() *PreparedHeader {
	p := r.Prepared
	if p == nil || len(p.fields) != len(r.Header) {
		return nil
	}
	if len(r.Header) > 0 && &p.fields[0] != &r.Header[0] {
		return nil
	}
	return p
}

// framingField reports the fields a response's Header cannot set, because
// the formatter writes them from the response itself.
func framingField(name string) bool {
	return equalFold(name, "Content-Length") || equalFold(name, "Connection") || equalFold(name, "Transfer-Encoding")
}
