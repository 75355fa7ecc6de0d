package haboob

import (
	"strings"

	"github.com/sandstorm-go/sandstorm/http"
)

// AcceptsGzip reports whether a request's Accept-Encoding fields (all of
// them, as one list) admit the gzip content coding (RFC 9110 §12.5.3):
// "gzip" or its alias "x-gzip" with a q-value above 0, or, when neither
// is listed, "*" with a q-value above 0. "gzip;q=0" refuses gzip whatever
// "*" says. No field, an empty field or an unparsable q-value means no:
// compression is only ever sent to a client that asks for it.
func AcceptsGzip(h http.Header) bool {
	gzip, star := -1, -1 // -1: not listed; 0: refused; 1: accepted
	for _, f := range h {
		if !strings.EqualFold(f.Name, "Accept-Encoding") {
			continue
		}
		for elem := range strings.SplitSeq(f.Value, ",") {
			coding, params, _ := strings.Cut(elem, ";")
			coding = strings.TrimSpace(coding)
			ok := qPositive(params)
			switch {
			case strings.EqualFold(coding, "gzip"), strings.EqualFold(coding, "x-gzip"):
				gzip = merge(gzip, ok)
			case coding == "*":
				star = merge(star, ok)
			}
		}
	}
	if gzip >= 0 {
		return gzip == 1
	}
	return star == 1
}

// merge combines a coding's listings: refused once, refused for good (the
// safe reading of a list that contradicts itself).
func merge(state int, ok bool) int {
	switch {
	case state == 0 || !ok:
		return 0
	default:
		return 1
	}
}

// qPositive reports whether an element's parameters (after the first ";")
// give it a weight above zero: no q parameter is q=1; a q-value that is not
// a valid qvalue ("0", "0.5", "1.000", RFC 9110 §12.4.2) counts as zero.
func qPositive(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		name, value, found := strings.Cut(p, "=")
		if !found || !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		return qValue(strings.TrimSpace(value)) > 0
	}
	return true
}

// qValue parses a qvalue into thousandths; -1 if it is malformed.
func qValue(s string) int {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return -1
	}
	n := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return n
	}
	if s[1] != '.' {
		return -1
	}
	scale := 100
	for i := 2; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n += int(c-'0') * scale
		scale /= 10
	}
	if n > 1000 {
		return -1
	}
	return n
}
