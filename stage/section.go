package stage

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
)

// Decoder reads one block of a configuration file: a section of `global:`,
// a section of a stage's block, a predicate block, a handler's args. It
// keeps the YAML library out of the API, and it locates every error it
// returns: the file, the line and the dotted key.
type Decoder interface {
	// Decode decodes the block strictly into v, a pointer to a value
	// pre-filled with its defaults: keys the block does not mention keep
	// their value; an unknown key, a value of the wrong kind or a bad
	// duration is an error naming the file, line and key (a *ConfigError
	// wrapping ErrInvalidConfig). An absent block leaves v alone.
	Decode(v any) error
	// Present reports whether the file has the block, with a value other
	// than null.
	Present() bool
	// Key returns the decoder of the value at key in the block. When the
	// block has no such key, that decoder is not Present, decodes nothing
	// and locates its errors at the closest enclosing block the file has.
	Key(key string) Decoder
	// Path is the block's dotted key path, e.g. "global.aio" or
	// "stages.Echo.remote".
	Path() string
	// File is the configuration file's name ("" for a document parsed
	// from memory).
	File() string
	// Errorf returns an error located at the block, for a check of its
	// value: it names the file, the line and the key path, and wraps
	// ErrInvalidConfig.
	Errorf(format string, args ...any) error
}

// yamlDecoder is the Decoder of a YAML node.
type yamlDecoder struct {
	n    *yaml.Node // the block; nil if the file does not have it
	at   *yaml.Node // where errors are located: n, or the closest enclosing block
	path string
	file string
}

// newDecoder returns the decoder of node n (nil: absent) at path.
func newDecoder(n *yaml.Node, path, file string) *yamlDecoder {
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return &yamlDecoder{n: n, at: n, path: path, file: file}
}

// NewDecoder returns the decoder of a YAML document, for blocks held
// outside a configuration file (tests, examples, a section read on its
// own). path is the block's key path in errors, file the name errors give
// ("" for none). A syntax error is a *ConfigError.
func NewDecoder(data []byte, file, path string) (Decoder, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: file, Err: yamlstrict.SyntaxError(err)}
	}
	if doc.Kind == 0 {
		return newDecoder(nil, path, file), nil
	}
	return newDecoder(&doc, path, file), nil
}

func (d *yamlDecoder) Decode(v any) error {
	if d.n == nil {
		return nil
	}
	if err := yamlstrict.Decode(d.n, d.path, v); err != nil {
		return &ConfigError{File: d.file, Err: err}
	}
	return nil
}

func (d *yamlDecoder) Present() bool {
	return d.n != nil && d.n.Kind != 0 && (d.n.Kind != yaml.ScalarNode || d.n.Tag != "!!null")
}

func (d *yamlDecoder) Key(key string) Decoder {
	c := lookup(d.n, key)
	at := d.at
	if c != nil {
		at = c
	}
	return &yamlDecoder{n: c, at: at, path: yamlstrict.Join(d.path, key), file: d.file}
}

func (d *yamlDecoder) Path() string { return d.path }
func (d *yamlDecoder) File() string { return d.file }

func (d *yamlDecoder) Errorf(format string, args ...any) error {
	return &ConfigError{File: d.file, Err: yamlstrict.Errorf(d.at, d.path, format, args...)}
}

// nodeOf returns the YAML node behind a decoder this package made (nil if
// absent or another implementation).
func nodeOf(d Decoder) *yaml.Node {
	if yd, ok := d.(*yamlDecoder); ok {
		return yd.n
	}
	return nil
}

// present reports whether d is a decoder with a block.
func present(d Decoder) bool { return d != nil && d.Present() }

// Section decodes and validates one block of a configuration that a
// package above stage owns: a section of `global:` (RegisterSection) or a
// key of every stage's block (RegisterStageSection).
type Section interface {
	// DecodeSection decodes and validates the block d holds (it may be
	// null: d.Present() is false) and returns its value, which
	// GlobalConfig.Section or StageConfig.Section give back to the owner
	// (nil: as if the block were absent). Errors should come from d
	// (Decode, Errorf, Key(k).Errorf) so that they name the file, line
	// and key; any other error is reported at the block's line.
	DecodeSection(d Decoder) (any, error)
}

// SectionFunc adapts a function to Section.
type SectionFunc func(d Decoder) (any, error)

// DecodeSection calls f(d).
func (f SectionFunc) DecodeSection(d Decoder) (any, error) { return f(d) }

// registered holds the registered sections. Registration happens from init
// functions; the lock makes a late registration safe.
var registered = struct {
	sync.RWMutex
	global map[string]Section
	stage  map[string]Section
}{global: map[string]Section{}, stage: map[string]Section{}}

// RegisterSection makes configurations accept the section `global.<name>`
// and decode it with s when they are parsed (ParseConfig, LoadConfig,
// Load, Parse): a mistake there fails the load with its file, line and
// key. Stage cannot import the packages that own these sections (they
// import stage): they register from init, as database/sql drivers do,
// so that linking the package in is all a program does:
//
//	func init() {
//		stage.RegisterSection("aio", stage.SectionFunc(func(d stage.Decoder) (any, error) {
//			return ParseConfig(d)
//		}))
//	}
//
// The owner gets the decoded value back with GlobalConfig.Section. A
// section no linked-in package registered is an unknown key, an error.
// RegisterSection panics if name is empty, one of the global block's own
// keys, or registered twice, or if s is nil.
func RegisterSection(name string, s Section) {
	register("global", registered.global, yamlKeys[GlobalConfig](), name, s)
}

// RegisterStageSection makes every stage's block accept the key name and
// decode its value with s (package remote registers "remote": how other
// nodes reach the stage). The owner gets the decoded value back with
// StageConfig.Section. It panics as RegisterSection does.
func RegisterStageSection(name string, s Section) {
	register("stage", registered.stage, yamlKeys[StageConfig](), name, s)
}

func register(scope string, m map[string]Section, own []string, name string, s Section) {
	switch {
	case name == "":
		panic("stage: Register section: empty " + scope + " section name")
	case s == nil:
		panic("stage: Register section: nil Section for " + scope + " section " + name)
	case slices.Contains(own, name):
		panic(fmt.Sprintf("stage: Register section: %q is a key of stage's own %s block", name, scope))
	}
	registered.Lock()
	defer registered.Unlock()
	if _, dup := m[name]; dup {
		panic(fmt.Sprintf("stage: %s section %q registered twice", scope, name))
	}
	m[name] = s
}

// Sections returns the names of the registered sections of `global:` and
// of stage blocks, sorted.
func Sections() (global, stages []string) {
	registered.RLock()
	defer registered.RUnlock()
	return slices.Sorted(maps.Keys(registered.global)), slices.Sorted(maps.Keys(registered.stage))
}

func sectionOf(m map[string]Section, name string) Section {
	registered.RLock()
	defer registered.RUnlock()
	return m[name]
}

// decodeSection runs a registered section over node v at path and returns
// its value; its errors are located (ParseConfig adds the file).
func decodeSection(s Section, v *yaml.Node, path, file string) (any, error) {
	if s == nil {
		return nil, nil // not reachable: sections are never unregistered
	}
	val, err := s.DecodeSection(newDecoder(v, path, file))
	if err == nil {
		return val, nil
	}
	var errs []error
	for _, e := range yamlstrict.Split(err) {
		if ce, ok := e.(*ConfigError); ok {
			e = ce.Err // ParseConfig adds the file
		}
		for _, x := range yamlstrict.Split(e) {
			if _, ok := errors.AsType[*yamlstrict.Error](x); !ok {
				x = yamlstrict.Errorf(v, path, "%v", x)
			}
			errs = append(errs, x)
		}
	}
	return nil, yamlstrict.Collect(errs...)
}

// splitKeys reads the keys of block n (global: or a stage's block) whose
// struct has the keys own and which also takes the keys extra and the
// registered sections of m. It returns the errors of the keys nobody
// knows, and the keys the strict decoding of the struct must skip: extra,
// the sections, and the unknown keys already reported.
func splitKeys(n *yaml.Node, path string, own, extra []string, m map[string]Section) (skip []string, sections map[string]*yaml.Node, errs []error) {
	registered.RLock()
	names := slices.Sorted(maps.Keys(m))
	registered.RUnlock()
	skip = append(slices.Clone(extra), names...)
	if n == nil || n.Kind != yaml.MappingNode {
		return skip, nil, nil
	}
	known := slices.Sorted(slices.Values(append(slices.Clone(own), skip...)))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case slices.Contains(names, k.Value):
			if sections == nil {
				sections = map[string]*yaml.Node{}
			}
			sections[k.Value] = v
		case slices.Contains(own, k.Value), slices.Contains(extra, k.Value):
		default:
			err := yamlstrict.UnknownKey(k, yamlstrict.Join(path, k.Value), known)
			if yamlstrict.Suggest(k.Value, known) == "" {
				ye := err.(*yamlstrict.Error)
				ye.Msg += "; or a section of a package that is not linked in (a forgotten import?)"
			}
			errs = append(errs, err)
			skip = append(skip, k.Value)
		}
	}
	return skip, sections, errs
}

// sectionValues holds the decoded sections of a block, shared by copies of
// the config; set copies it on write.
type sectionValues map[string]any

func (s sectionValues) get(name string) (any, bool) {
	v, ok := s[name]
	return v, ok
}

func (s *sectionValues) set(name string, v any) {
	c := maps.Clone(*s)
	if c == nil {
		c = sectionValues{}
	}
	if v == nil {
		delete(c, name)
	} else {
		c[name] = v
	}
	*s = c
}

// Section returns the decoded value of the section `global.<name>` (as
// the registered Section returned it), and false if the configuration has
// none.
func (g *GlobalConfig) Section(name string) (any, bool) { return g.sections.get(name) }

// SetSection sets the value of the section `global.<name>` (nil removes
// it), for configurations built or amended in Go. Copies of g made before
// keep their values.
func (g *GlobalConfig) SetSection(name string, v any) { g.sections.set(name, v) }

// Section returns the decoded value of the stage's section name (as the
// section registered with RegisterStageSection returned it), and false if
// the stage has none.
func (sc *StageConfig) Section(name string) (any, bool) { return sc.sections.get(name) }

// SetSection sets the value of the stage's section name (nil removes it),
// for stages configured in Go. Copies of sc made before keep their values.
func (sc *StageConfig) SetSection(name string, v any) { sc.sections.set(name, v) }
