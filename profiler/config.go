package profiler

import (
	"net"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Defaults applied to zero Config fields.
const (
	DefaultInterval = time.Second
	DefaultFile     = "sandstorm-profile.log"
	DefaultGraph    = "sandstorm-graph.dot"
)

// Config is the `global.profiler` block of a stage configuration. Its zero
// value is the default: off, sampling every second once switched on.
//
// Enabled switches on the files: the profile log and the stage graph. HTTP,
// when non-empty, serves the dashboard and the metrics endpoints whether or
// not Enabled is set. With neither, the profiler does nothing.
type Config struct {
	Enabled  bool          `yaml:"enabled"`
	Interval time.Duration `yaml:"interval"` // 0 → 1s
	File     string        `yaml:"file"`     // profile log; "" → sandstorm-profile.log
	Graph    string        `yaml:"graph"`    // Graphviz stage graph; "" → sandstorm-graph.dot
	HTTP     string        `yaml:"http"`     // listen address such as 127.0.0.1:9090; "" → off
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.File == "" {
		c.File = DefaultFile
	}
	if c.Graph == "" {
		c.Graph = DefaultGraph
	}
	return c
}

// active reports whether the profiler has anything to do.
func (c Config) active() bool { return c.Enabled || c.HTTP != "" }

const configPath = "global.profiler"

// DecodeConfig decodes a `global.profiler` block strictly: an unknown key, a
// value of the wrong type, a bad or negative duration or a malformed listen
// address is an error naming file (may be ""), line and key. It wraps
// stage.ErrInvalidConfig. An absent block (nil or zero node) gives the
// zero Config.
func DecodeConfig(n *yaml.Node, file string) (Config, error) {
	var c Config
	if n == nil || n.Kind == 0 {
		return c, nil
	}
	fail := func(err error) (Config, error) { return Config{}, &stage.ConfigError{File: file, Err: err} }
	if err := yamlstrict.Decode(n, configPath, &c); err != nil {
		return fail(err)
	}
	if c.Interval < 0 {
		return fail(yamlstrict.Errorf(lookup(n, "interval"), configPath+".interval", "negative duration %v", c.Interval))
	}
	if c.HTTP != "" {
		if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
			return fail(yamlstrict.Errorf(lookup(n, "http"), configPath+".http",
				"bad listen address %q (want host:port such as 127.0.0.1:9090, or \"\" for off)", c.HTTP))
		}
	}
	return c, nil
}

// ConfigFrom decodes the profiler block of the configuration m was built
// from; a manager built from Go (no configuration) gives the zero Config.
func ConfigFrom(m *stage.Manager) (Config, error) {
	cfg := m.Config()
	if cfg == nil {
		return Config{}, nil
	}
	return DecodeConfig(&cfg.Global.Profiler, cfg.File)
}

// lookup returns the value node of key in mapping n, or n itself.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
	}
	return n
}
