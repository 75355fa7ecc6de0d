package remote

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/internal/yamlstrict"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ClusterConfig is the `global.cluster:` block.
type ClusterConfig struct {
	// NATS lists the NATS server URLs to join (comma-separated). Empty:
	// this process embeds a NATS server (with JetStream).
	NATS string `yaml:"nats"`
	// Listen is the client address of the embedded server for other
	// processes ("127.0.0.1:4222"). Empty: in-process connections only.
	Listen string `yaml:"listen"`
	// Node is this process's node name; a command's -node flag overrides.
	Node string `yaml:"node"`
	// Prefix starts every subject and stream name (default "sandstorm").
	Prefix string `yaml:"prefix"`
	// Heartbeat is how often a replica publishes its queue length
	// (default 100ms); a replica silent for three beats is taken as gone.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// StoreDir is the embedded server's JetStream directory (default: a
	// temporary directory removed at Close).
	StoreDir string `yaml:"storeDir"`
	// KeepTTL bounds how long objects kept for a reply (Wire.Keep) wait to
	// be taken (default 2m).
	KeepTTL time.Duration `yaml:"keepTTL"`
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Prefix == "" {
		c.Prefix = "sandstorm"
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 100 * time.Millisecond
	}
	if c.KeepTTL == 0 {
		c.KeepTTL = 2 * time.Minute
	}
	return c
}

// Validate checks the configuration.
func (c ClusterConfig) Validate() error {
	switch {
	case c.Heartbeat < 0:
		return fmt.Errorf("%w: negative heartbeat %v", stage.ErrInvalidConfig, c.Heartbeat)
	case c.KeepTTL < 0:
		return fmt.Errorf("%w: negative keepTTL %v", stage.ErrInvalidConfig, c.KeepTTL)
	case strings.ContainsAny(c.Prefix, " .*>\t"):
		return fmt.Errorf("%w: prefix %q is not a NATS subject token", stage.ErrInvalidConfig, c.Prefix)
	case strings.ContainsAny(c.Node, " .*>\t"):
		return fmt.Errorf("%w: node name %q is not a NATS subject token", stage.ErrInvalidConfig, c.Node)
	}
	return nil
}

func init() {
	stage.RegisterSection("cluster", func(n *yaml.Node, path string) error {
		_, err := decodeCluster(n, path)
		return err
	})
}

func decodeCluster(n *yaml.Node, path string) (ClusterConfig, error) {
	var c ClusterConfig
	if err := yamlstrict.Decode(n, path, &c); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, yamlstrict.Errorf(n, path, "%v", err)
	}
	return c, nil
}

// ClusterFrom returns the configuration's `global.cluster` block, and
// false if it has none (one process, no NATS).
func ClusterFrom(cfg *stage.Config) (ClusterConfig, bool, error) {
	n := &cfg.Global.Cluster
	if n.Kind == 0 || n.Tag == "!!null" {
		return ClusterConfig{}, false, nil
	}
	c, err := decodeCluster(n, "global.cluster")
	if err != nil {
		return c, true, &stage.ConfigError{File: cfg.File, Err: err}
	}
	return c, true, nil
}

// remoteConfig returns a stage's remote block with defaults.
func remoteConfig(sc *stage.StageConfig) stage.RemoteConfig {
	var r stage.RemoteConfig
	if sc.Remote != nil {
		r = *sc.Remote
	}
	if r.Mode == "" {
		r.Mode = stage.RemoteRequest
	}
	if r.Timeout == 0 {
		if r.Mode == stage.RemoteDurable {
			r.Timeout = 30 * time.Second
		} else {
			r.Timeout = 2 * time.Second
		}
	}
	switch r.Retries {
	case 0:
		r.Retries = 2
	case -1:
		r.Retries = 0
	}
	if r.Duplicates == 0 {
		r.Duplicates = 2 * time.Minute
	}
	if r.NakDelay == 0 {
		r.NakDelay = time.Second
	}
	return r
}
