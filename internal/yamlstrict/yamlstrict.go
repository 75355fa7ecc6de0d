// Package yamlstrict decodes YAML nodes into Go values strictly: an unknown
// key, a value of the wrong kind or a bad duration is an error naming the
// line and the dotted key path, never silently ignored.
package yamlstrict

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is wrapped by every error this package returns.
var ErrInvalid = errors.New("invalid configuration")

// Error locates a configuration error.
type Error struct {
	Line int    // 1-based line in the document, 0 if unknown
	Path string // dotted key path, e.g. stages.Echo.threadpool.max
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Errorf builds an *Error at node n (which may be nil).
func Errorf(n *yaml.Node, path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &Error{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Join appends key to a dotted path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	nodeType        = reflect.TypeFor[yaml.Node]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	textType        = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// UnknownKey is the error for key k, not one of known: it suggests the
// closest known key when one is close enough to be a typo.
func UnknownKey(k *yaml.Node, path string, known []string) error {
	if s := Suggest(k.Value, known); s != "" {
		return Errorf(k, path, "unknown key (did you mean %q? known: %s)", s, strings.Join(known, ", "))
	}
	return Errorf(k, path, "unknown key (known: %s)", strings.Join(known, ", "))
}

// Collect joins the non-nil errors, flattening joined ones, in the order
// given (callers give them in file order); nil if there are none. A single
// error comes back as it is.
func Collect(errs ...error) error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, Split(err)...)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return errors.Join(out...)
}

// joinType is the type of errors.Join's errors.
var joinType = reflect.TypeOf(errors.Join(errors.New("a"), errors.New("b")))

// Split returns the errors errors.Join joined into err (flattened), or
// err alone. Other errors wrapping several are not split.
func Split(err error) []error {
	if err == nil {
		return nil
	}
	if reflect.TypeOf(err) != joinType {
		return []error{err}
	}
	var out []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		out = append(out, Split(e)...)
	}
	return out
}

// Suggest returns the candidate closest to word if it is close enough to
// be a typo of it (a different case, or, for words of two letters or
// more, an edit distance of at most a third of its length, at least 1 and
// at most 3), else "".
func Suggest(word string, candidates []string) string {
	best, bestD := "", 0
	limit := min(max(len(word)/3, 1), 3)
	for _, c := range candidates {
		if c == word {
			continue
		}
		d := distance(strings.ToLower(word), strings.ToLower(c))
		if d == 0 {
			return c
		}
		if len(word) >= 2 && d <= limit && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance (insertions, deletions,
// substitutions and transpositions of neighbours count 1) between a and b.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// SyntaxError turns an error of yaml.Unmarshal into an *Error with the
// right line: yaml.v3 reports its parser's errors (an unclosed '{' or
// '[', a missing key ...) on a 0-based line, one line early, and only its
// scanner's errors on the 1-based line. For an unclosed bracket the line
// is the bracket's (unless it is on the document's first line: yaml.v3
// then gives where the parser gave up).
func SyntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if _, scanErr := fmt.Sscanf(n, "%d", &line); scanErr == nil {
				msg = after
			} else {
				line = 0
			}
		}
	}
	if parserProblems[msg] {
		line++ // 0-based (line 0 is not printed by yaml.v3 at all)
		switch msg {
		case "did not find expected ',' or '}'":
			msg = "'{' not closed (did not find expected ',' or '}')"
		case "did not find expected ',' or ']'":
			msg = "'[' not closed (did not find expected ',' or ']')"
		}
	}
	return &Error{Line: line, Msg: msg}
}

// parserProblems are the messages of yaml.v3's parser (parserc.go), whose
// lines are 0-based; its scanner's messages are not here.
var parserProblems = map[string]bool{
	"did not find expected ',' or '}'":       true,
	"did not find expected ',' or ']'":       true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// Decode checks n against v's type (v must be a non-nil pointer) and then
// decodes it. Fields already set in *v keep their value when n does not
// mention them, so a struct pre-filled with defaults is overridden key by key.
// skip lists top-level keys of n to ignore (for example a "type"
// discriminator decoded elsewhere); an unknown key's error lists them among
// the known keys.
func Decode(n *yaml.Node, path string, v any, skip ...string) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("yamlstrict: Decode needs a non-nil pointer, got %T", v)
	}
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if err := check(n, path, rv.Type().Elem(), skip); err != nil {
		return err
	}
	if len(skip) > 0 && n.Kind == yaml.MappingNode {
		n = without(n, skip)
	}
	if err := n.Decode(v); err != nil {
		return Errorf(n, path, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return nil
}

// without returns a shallow copy of mapping node n minus the given keys.
func without(n *yaml.Node, skip []string) *yaml.Node {
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if contains(skip, n.Content[i].Value) {
			continue
		}
		c.Content = append(c.Content, n.Content[i], n.Content[i+1])
	}
	return &c
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func check(n *yaml.Node, path string, t reflect.Type, skip []string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if t == nodeType {
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		// the type's own UnmarshalYAML decides; its error is located here,
		// at the key, rather than at the enclosing block
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return Errorf(n, path, "%s", unlocated(err, n.Line))
		}
		return nil
	}
	if reflect.PointerTo(t).Implements(textType) {
		// a scalar the type parses itself (yaml.v3 hands it the text)
		if n.Kind != yaml.ScalarNode {
			return Errorf(n, path, "want a %s value, got %s", t.Name(), kindName(n))
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			return Errorf(n, path, "%v", err)
		}
		return nil
	}
	if t == durationType {
		if n.Kind != yaml.ScalarNode {
			return Errorf(n, path, "want a duration such as 500ms or 2s")
		}
		if _, err := time.ParseDuration(n.Value); err != nil {
			return Errorf(n, path, "bad duration %q (want e.g. 500ms, 2s, 1m)", n.Value)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return check(n, path, t.Elem(), skip)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return Errorf(n, path, "want a mapping, got %s", kindName(n))
		}
		fields := fieldsOf(t)
		known := sortedKeys(fields)
		if len(skip) > 0 {
			for _, k := range skip {
				fields[k] = nil
			}
			known = sortedKeys(fields)
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if contains(skip, k.Value) {
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				errs = append(errs, UnknownKey(k, Join(path, k.Value), known))
				continue
			}
			errs = append(errs, check(val, Join(path, k.Value), ft, nil))
		}
		return Collect(errs...)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return Errorf(n, path, "want a mapping, got %s", kindName(n))
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := Join(path, k.Value)
			if err := check(k, p, t.Key(), nil); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, check(val, p, t.Elem(), nil))
		}
		return Collect(errs...)
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return Errorf(n, path, "want a list, got %s", kindName(n))
		}
		var errs []error
		for i, c := range n.Content {
			errs = append(errs, check(c, fmt.Sprintf("%s[%d]", path, i), t.Elem(), nil))
		}
		return Collect(errs...)
	default:
		if n.Kind != yaml.ScalarNode {
			return Errorf(n, path, "want a %s value, got %s", t.Kind(), kindName(n))
		}
		if isInteger(t.Kind()) {
			return checkWhole(n, path, t)
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return Errorf(n, path, "want a %s value, got %s", t.Kind(), kindName(n))
		}
		return nil
	}
}

// unlocated returns err's message without yaml.v3's prefix or a leading
// "line N: " for the node's own line, which Errorf adds back.
func unlocated(err error, line int) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line))
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// checkWhole checks that scalar n holds a whole number that fits integer
// type t. yaml.v3 alone would truncate 1.5 to 1 and turn -1e30 into
// math.MinInt64; a whole float such as 2.0 or 1e3 is accepted.
func checkWhole(n *yaml.Node, path string, t reflect.Type) error {
	switch n.ShortTag() {
	case "!!int":
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return Errorf(n, path, "%s is out of range for %s", n.Value, t.Kind())
		}
		return nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
			return Errorf(n, path, "want a whole number, got %s", kindName(n))
		}
		if !fits(f, t) {
			return Errorf(n, path, "%s is out of range for %s", n.Value, t.Kind())
		}
		return nil
	}
	return Errorf(n, path, "want a whole number, got %s", kindName(n))
}

// fits reports whether whole number f is representable in integer type t.
func fits(f float64, t reflect.Type) bool {
	const two63 = 1 << 63
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return f >= 0 && f < 2*two63 && !v.OverflowUint(uint64(f))
	}
	return f >= -two63 && f < two63 && !v.OverflowInt(int64(f))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// fieldsOf maps the YAML keys of struct type t to field types, following
// yaml.v3's rules: the yaml tag's name, else the lower-cased field name;
// "-" skips; ",inline" merges.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// small maps: insertion sort keeps this dependency-free and stable
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
