package profiler

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/stage"
)

// Admin paths served by Handler beside the dashboard (DESIGN §12).
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	ConfigPath  = "/config"
)

// Redacted replaces the value of a secret key in /config.
const Redacted = "<redacted>"

// Drain marks the process as draining: /readyz answers 503 from now on,
// so that a load balancer stops sending traffic before the listeners
// close. A command calls it when its shutdown begins, before it stops
// its servers (the manager's own Shutdown makes /readyz 503 too, but
// only once the servers in front of it are done).
func (p *Profiler) Drain() { p.draining.Store(true) }

// Ready reports whether /readyz answers 200: nil while the process
// serves, else why not (Drain was called, the profiler is stopping, or
// the manager is not serving: see stage.Manager.Ready, which reports a
// root supervisor that gave up).
func (p *Profiler) Ready() error {
	if p.draining.Load() {
		return fmt.Errorf("%w: draining", stage.ErrNotReady)
	}
	select {
	case <-p.stopped:
		return fmt.Errorf("%w: profiler stopping", stage.ErrNotReady)
	default:
	}
	return p.m.Ready()
}

func (p *Profiler) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

func (p *Profiler) serveReadyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := p.Ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (p *Profiler) serveConfig(w http.ResponseWriter, r *http.Request) {
	out, err := EffectiveConfig(p.m.Config(), p.cfg)
	if err != nil {
		p.log.Warn("rendering the configuration", "err", err)
		http.Error(w, "rendering the configuration failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(out)
}

// EffectiveConfig renders cfg (nil: a manager built in Go, with no
// configuration) as YAML: the values in force, defaults filled in, the
// registered sections as their packages decoded them, every stage's
// predicate and args as written, and global.profiler replaced by prof,
// the profiler's own configuration after command-line overrides. Secrets
// are redacted: the string value of every key one of whose words
// (split at '_', '-', '.' and lower-to-upper case changes) is password,
// passwd, secret, token, key, nkey, creds, credential(s) or auth —
// tls.key, tokenFile, nkeyFile, credsFile, apiKey, nats password — reads
// Redacted. Files named by the
// configuration are never opened.
func EffectiveConfig(cfg *stage.Config, prof Config) ([]byte, error) {
	var root yaml.Node
	root.Kind = yaml.MappingNode
	if cfg == nil {
		cfg = &stage.Config{}
		addComment(&root, "built in Go: no configuration file")
	} else if cfg.File != "" {
		addComment(&root, "from "+cfg.File)
	}
	if cfg.Node != "" {
		if err := addValue(&root, "node", cfg.Node); err != nil {
			return nil, err
		}
	}
	global, err := encode(cfg.Global)
	if err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	if err := addDecoder(global, "predicate", cfg.Global.Predicate); err != nil {
		return nil, fmt.Errorf("global.predicate: %w", err)
	}
	gnames, snames := stage.Sections()
	for _, name := range gnames {
		v, ok := cfg.Global.Section(name)
		if name == sectionName {
			v, ok = prof, true
		}
		if !ok {
			continue
		}
		if err := addValue(global, name, v); err != nil {
			return nil, fmt.Errorf("global.%s: %w", name, err)
		}
	}
	appendPair(&root, "global", global)

	if len(cfg.Stages) > 0 {
		stages := &yaml.Node{Kind: yaml.MappingNode}
		for _, st := range cfg.Stages {
			sc := st.Config
			n, err := encode(sc)
			if err != nil {
				return nil, fmt.Errorf("stages.%s: %w", st.Name, err)
			}
			if err := addDecoder(n, "predicate", sc.PredicateSpec); err != nil {
				return nil, fmt.Errorf("stages.%s.predicate: %w", st.Name, err)
			}
			if err := addDecoder(n, "args", sc.Args); err != nil {
				return nil, fmt.Errorf("stages.%s.args: %w", st.Name, err)
			}
			for _, name := range snames {
				if v, ok := sc.Section(name); ok {
					if err := addValue(n, name, v); err != nil {
						return nil, fmt.Errorf("stages.%s.%s: %w", st.Name, name, err)
					}
				}
			}
			appendPair(stages, st.Name, n)
		}
		appendPair(&root, "stages", stages)
	}
	if len(cfg.Supervisors) > 0 {
		sups := &yaml.Node{Kind: yaml.MappingNode}
		for _, s := range cfg.Supervisors {
			if err := addValue(sups, s.Name, s.Config); err != nil {
				return nil, fmt.Errorf("supervisors.%s: %w", s.Name, err)
			}
		}
		appendPair(&root, "supervisors", sups)
	}
	redact(&root)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// encode turns v into a YAML node; a value YAML cannot represent (a
// func, a channel) is an error rather than a panic.
func encode(v any) (n *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("cannot render %T: %v", v, r)
		}
	}()
	n = &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return n, nil
}

// addValue appends key: v to mapping m; a value that cannot be rendered
// is shown as a comment saying so, not as an error, so that one exotic
// section does not hide the rest.
func addValue(m *yaml.Node, key string, v any) error {
	n, err := encode(v)
	if err != nil {
		n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", LineComment: err.Error()}
	}
	appendPair(m, key, n)
	return nil
}

// addDecoder appends key: the block d holds, as written (absent: nothing).
func addDecoder(m *yaml.Node, key string, d stage.Decoder) error {
	if d == nil || !d.Present() {
		return nil
	}
	var v yaml.Node // in file order, as written
	if err := d.Decode(&v); err != nil {
		return err
	}
	appendPair(m, key, blockCopy(&v))
	return nil
}

// blockCopy returns a deep copy of n in block style: redaction must not
// touch the configuration's own nodes, which the decoding shares.
func blockCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Style &^= yaml.FlowStyle
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = blockCopy(k)
	}
	if n.Alias != nil {
		c.Alias = blockCopy(n.Alias)
	}
	return &c
}

func appendPair(m *yaml.Node, key string, v *yaml.Node) {
	if m.Kind != yaml.MappingNode { // a struct that encoded to null
		*m = yaml.Node{Kind: yaml.MappingNode}
	}
	// A key the struct encoding has already (a field rendered empty) is
	// replaced.
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func addComment(m *yaml.Node, c string) {
	if m.HeadComment == "" {
		m.HeadComment = c
	} else {
		m.HeadComment += "\n" + c
	}
}

// secretWords are the words of a key whose string value /config hides.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "secret": true, "token": true,
	"key": true, "credential": true, "credentials": true, "auth": true,
	"apikey": true, "passphrase": true, "nkey": true, "creds": true,
}

// IsSecretKey reports whether /config redacts the string value of a key
// named name (see EffectiveConfig).
func IsSecretKey(name string) bool {
	for _, w := range keyWords(name) {
		if secretWords[w] {
			return true
		}
	}
	return false
}

// keyWords splits a key into lower-case words: "tokenFile" → token, file;
// "api_key" → api, key; "TLSKey" → tls, key.
func keyWords(name string) []string {
	var words []string
	var cur []rune
	rs := []rune(name)
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for i, r := range rs {
		switch {
		case r == '_' || r == '-' || r == '.' || r == ' ':
			flush()
			continue
		case unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) ||
			(i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))):
			flush()
		}
		cur = append(cur, r)
	}
	flush()
	return words
}

// redact replaces, through the whole tree, the non-empty string scalars
// of secret keys, and every scalar inside a mapping or sequence held by a
// secret key.
func redact(n *yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			redact(c)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if IsSecretKey(k.Value) {
				hide(v)
				continue
			}
			redact(v)
		}
	}
}

// hide redacts every string scalar under n (bools and numbers say
// nothing secret and stay: `keyed: true`).
func hide(n *yaml.Node) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" && n.Value != "" || n.Tag == "!!binary" {
			n.Value, n.Tag, n.Style = Redacted, "!!str", 0
		}
	case yaml.AliasNode:
		*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
	default:
		for _, c := range n.Content {
			hide(c)
		}
	}
}
