package stage

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
)

// StageArgs declares which of a handler's args name other stages, so that
// Load checks them with the rest of the file, before any stage starts: a
// mistyped stage name is an error naming the file, line and key, with a
// "did you mean". Each key is a dotted path into the args; a "*" segment
// stands for every value of a mapping or every item of a list:
//
//	reg.Register("shop.Front", newFront)
//	reg.StageArgs("shop.Front", "next", "routes.*")
//
// An empty value names no stage and is not checked.
func (r *Registry) StageArgs(handler string, keys ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stageArgs == nil {
		r.stageArgs = map[string][]string{}
	}
	r.stageArgs[handler] = append(r.stageArgs[handler], keys...)
}

func (r *Registry) stageArgKeys(handler string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.stageArgs[handler]
}

// locatedError is a configuration error at a line that also wraps a
// sentinel (ErrUnknownHandler, ErrNoStage).
type locatedError struct {
	ye   *yamlstrict.Error
	kind error
}

func (e *locatedError) Error() string        { return e.ye.Error() }
func (e *locatedError) Unwrap() error        { return e.ye }
func (e *locatedError) Is(target error) bool { return target == e.kind }

// checkReferences reports, all at once and in file order, the stages whose
// handler is not registered and the stage names in args (as declared with
// Registry.StageArgs) that name no stage of the file.
func checkReferences(cfg *Config, r *Registry) error {
	names := make([]string, len(cfg.Stages))
	for i, ns := range cfg.Stages {
		names[i] = ns.Name
	}
	var errs []error
	for _, ns := range cfg.Stages {
		sc := &ns.Config
		if _, ok := r.Lookup(sc.Handler); !ok {
			msg := fmt.Sprintf("unknown handler %q (forgotten import?)", sc.Handler)
			if s := yamlstrict.Suggest(sc.Handler, r.Names()); s != "" {
				msg = fmt.Sprintf("unknown handler %q (did you mean %q? or a forgotten import)", sc.Handler, s)
			}
			errs = append(errs, &locatedError{
				ye:   &yamlstrict.Error{Line: sc.handlerLine, Path: yamlstrict.Join(sc.path, "handler"), Msg: msg},
				kind: ErrUnknownHandler,
			})
			continue
		}
		for _, key := range r.stageArgKeys(sc.Handler) {
			walkArgs(nodeOf(sc.Args), sc.path+".args", strings.Split(key, "."), func(n *yaml.Node, path string) {
				if n.Kind != yaml.ScalarNode || n.Value == "" || slices.Contains(names, n.Value) {
					return
				}
				errs = append(errs, noStageError(n, path, n.Value, names))
			})
		}
	}
	if err := inFileOrder(errs); err != nil {
		return &ConfigError{File: cfg.File, Err: err}
	}
	return nil
}

// noStageError says that name, at node n, names no stage.
func noStageError(n *yaml.Node, path, name string, stages []string) error {
	msg := fmt.Sprintf("no stage %q", name)
	if s := yamlstrict.Suggest(name, stages); s != "" {
		msg = fmt.Sprintf("no stage %q (did you mean %q?)", name, s)
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	return &locatedError{ye: &yamlstrict.Error{Line: line, Path: path, Msg: msg}, kind: ErrNoStage}
}

// walkArgs calls f for every node at the key path keys below n.
func walkArgs(n *yaml.Node, path string, keys []string, f func(*yaml.Node, string)) {
	if n == nil || n.Kind == 0 {
		return
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if len(keys) == 0 {
		f(n, path)
		return
	}
	key, rest := keys[0], keys[1:]
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; key == "*" || k == key {
				walkArgs(n.Content[i+1], yamlstrict.Join(path, k), rest, f)
			}
		}
	case yaml.SequenceNode:
		if key == "*" {
			for i, c := range n.Content {
				walkArgs(c, fmt.Sprintf("%s[%d]", path, i), rest, f)
			}
		}
	}
}

// ArgError locates err at the stage's args key path keys (the deepest of
// them the file has; the args block itself if none) for a check made in
// Init: the error names the file, the line and the key, like the loader's
// own errors, and wraps err.
//
//	if a.MaxConnections < 0 {
//		return c.ArgError(fmt.Errorf("must not be negative, got %d", a.MaxConnections), "maxConnections")
//	}
func (c *Context) ArgError(err error, keys ...string) error {
	n, path := nodeOf(c.args), c.path
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	found := true
	for _, k := range keys {
		path = yamlstrict.Join(path, k)
		if !found {
			continue
		}
		if next := lookup(n, k); next != nil {
			n = next
		} else {
			found = false // the line of the deepest block the file has
		}
	}
	line := 0
	if n != nil && n.Kind != 0 {
		line = n.Line
	}
	return &ConfigError{File: c.file, Err: &argError{ye: &yamlstrict.Error{Line: line, Path: path, Msg: err.Error()}, err: err}}
}

// argError is an error from a handler's Init located in its args.
type argError struct {
	ye  *yamlstrict.Error
	err error
}

func (e *argError) Error() string   { return e.ye.Error() }
func (e *argError) Unwrap() []error { return []error{e.ye, e.err} }

// sinkError locates a failed Context.Sink lookup at the args value that
// names the stage, if the args hold it, with a "did you mean".
func (c *Context) sinkError(name string, err error) error {
	if !errors.Is(err, ErrNoStage) {
		return err
	}
	var at *yaml.Node
	var atPath string
	walkArgs(nodeOf(c.args), c.path, nil, func(root *yaml.Node, _ string) {
		var find func(n *yaml.Node, path string)
		find = func(n *yaml.Node, path string) {
			if at != nil {
				return
			}
			switch n.Kind {
			case yaml.ScalarNode:
				if n.Value == name {
					at, atPath = n, path
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					find(n.Content[i+1], yamlstrict.Join(path, n.Content[i].Value))
				}
			case yaml.SequenceNode:
				for i, x := range n.Content {
					find(x, fmt.Sprintf("%s[%d]", path, i))
				}
			}
		}
		find(root, c.path)
	})
	if at == nil {
		return err
	}
	var stages []string
	for _, s := range c.mgr.Stages() {
		stages = append(stages, s.Name())
	}
	return &ConfigError{File: c.file, Err: noStageError(at, atPath, name, stages)}
}
