package profiler

import (
	"fmt"
	"net"
	"time"

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

// DecodeConfig decodes a `global.profiler` block strictly: an unknown key, a
// value of the wrong type, a bad or negative duration or a malformed listen
// address is an error naming the file, line and key. It wraps
// stage.ErrInvalidConfig. An absent or null block gives the zero Config.
// Linking the profiler in registers it as the section "profiler", so that
// stage.ParseConfig (Load, Parse) calls it.
func DecodeConfig(d stage.Decoder) (Config, error) {
	var c Config
	if !d.Present() {
		return c, nil
	}
	if err := d.Decode(&c); err != nil {
		return Config{}, err
	}
	if c.Interval < 0 {
		return Config{}, d.Key("interval").Errorf("negative duration %v", c.Interval)
	}
	if c.HTTP != "" {
		if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
			return Config{}, d.Key("http").Errorf(
				"bad listen address %q (want host:port such as 127.0.0.1:9090, or \"\" for off)", c.HTTP)
		}
	}
	return c, nil
}

// ConfigFrom returns the profiler block of the configuration m was built
// from, as the load decoded it; a manager built from Go (no
// configuration), or from a file without the block, gives the zero Config.
func ConfigFrom(m *stage.Manager) (Config, error) {
	cfg := m.Config()
	if cfg == nil {
		return Config{}, nil
	}
	v, ok := cfg.Global.Section(sectionName)
	if !ok {
		return Config{}, nil
	}
	c, ok := v.(Config)
	if !ok {
		return Config{}, fmt.Errorf("%w: section %s holds a %T, not a profiler.Config", stage.ErrInvalidConfig, sectionName, v)
	}
	return c, nil
}

// sectionName is the profiler's section of `global:`.
const sectionName = "profiler"
