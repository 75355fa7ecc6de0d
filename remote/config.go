package remote

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

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
	// TokenFile names a file holding the cluster's token (whitespace
	// around it trimmed): the embedded server requires it and every node
	// presents it. Only the path is kept here; the token itself is read
	// when the node joins and is never logged nor put in an error.
	TokenFile string `yaml:"tokenFile"`
	// NKeyFile names a file holding the cluster's NKey user seed ("SU...",
	// as `nk -gen user` writes it, or a decorated creds-style block):
	// the embedded server admits only that user's public key, and every
	// node signs the server's challenge with the seed. Like the token, only
	// the path is kept; the seed never leaves the file but for signing.
	NKeyFile string `yaml:"nkeyFile"`
	// CredsFile names a NATS credentials file (a user JWT and its seed)
	// for joining an external NATS server with decentralized
	// authentication (operator, accounts). The embedded server cannot
	// check JWTs: a node embedding it with credsFile is a configuration
	// error (use nkeyFile or tokenFile there).
	CredsFile string `yaml:"credsFile"`
	// TLS makes the embedded server and every node's connection speak
	// TLS (zero: plain TCP).
	TLS ClusterTLS `yaml:"tls"`
}

// ClusterTLS is the `global.cluster.tls:` block: PEM files. The node
// embedding the NATS server offers Cert/Key as its certificate and, when
// CA is set, requires every other node to present a certificate signed by
// CA (mutual TLS); a node joining with `nats:` verifies the server
// against CA (empty: the system's roots) and presents Cert/Key when set.
// One block serves every node of a graph when its certificate is valid
// for both server and client authentication.
type ClusterTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// Enabled reports whether the block asks for TLS.
func (t ClusterTLS) Enabled() bool { return t != (ClusterTLS{}) }

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
	case c.TLS.Cert != "" && c.TLS.Key == "":
		return fmt.Errorf("%w: tls.cert %q without tls.key", stage.ErrInvalidConfig, c.TLS.Cert)
	case c.TLS.Key != "" && c.TLS.Cert == "":
		return fmt.Errorf("%w: tls.key %q without tls.cert", stage.ErrInvalidConfig, c.TLS.Key)
	case c.authKinds() > 1:
		return fmt.Errorf("%w: tokenFile, nkeyFile and credsFile exclude each other (one way for nodes to authenticate)", stage.ErrInvalidConfig)
	case c.CredsFile != "" && c.NATS == "":
		return fmt.Errorf("%w: credsFile needs an external NATS server (nats: URL): the embedded server cannot check JWTs; use nkeyFile or tokenFile", stage.ErrInvalidConfig)
	}
	return nil
}

// authKinds counts the authentication methods the configuration sets.
func (c ClusterConfig) authKinds() int {
	n := 0
	for _, f := range []string{c.TokenFile, c.NKeyFile, c.CredsFile} {
		if f != "" {
			n++
		}
	}
	return n
}

// readNKey reads the NKey user seed in file and returns its public key;
// an unreadable file, or one holding no user seed, is an error naming the
// file (never the seed), which the caller wraps in stage.ErrInvalidConfig.
func readNKey(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("nkey file %q: %v", file, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("nkey file %q: no NKey seed in it", file)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("nkey file %q: not a user seed (SU...)", file)
	}
	return pub, nil
}

// readToken reads the cluster token from file, trimmed; an unreadable or
// empty file is an error naming the file (never the token), which the
// caller wraps in stage.ErrInvalidConfig.
func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, below
		}
		return "", fmt.Errorf("token file %q: %v", file, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %q is empty", file)
	}
	return tok, nil
}

// Delivery modes of a stage's `remote:` block.
const (
	ModeRequest = "request" // core NATS: verdict at once, retransmission with an idempotency key
	ModeDurable = "durable" // a JetStream work-queue stream: ack after the handler succeeded
)

// StageConfig is a stage's `remote:` block: how other nodes reach the
// stage when it is hosted elsewhere (its `nodes:` say where; see
// stage.StageConfig.Nodes). Linking remote in registers the key with
// stage (stage.RegisterStageSection); stage.StageConfig.Section("remote")
// returns the decoded block, and StageConfigOf it with defaults. Zero
// fields take the defaults.
type StageConfig struct {
	// Mode is "request" (default) or "durable".
	Mode string `yaml:"mode"`
	// Timeout bounds a sender's wait for a verdict (request mode,
	// retransmissions included; default 2s) or, in durable mode, how long
	// a replica may take to acknowledge a delivered event before it is
	// redelivered (default 30s).
	Timeout time.Duration `yaml:"timeout"`
	// Retries is how many times a request is retransmitted (same
	// idempotency key) after a per-attempt timeout; 0 takes the default
	// (2), -1 means none.
	Retries int `yaml:"retries"`
	// Duplicates is the window in which a replica (request) or the stream
	// (durable) recognises a retransmitted event (default 2m).
	Duplicates time.Duration `yaml:"duplicates"`
	// NakDelay is how long a durable event a replica's predicate refused
	// waits before it is redelivered (default 1s).
	NakDelay time.Duration `yaml:"nakDelay"`
	// MaxDeliver is how many times a durable event is delivered (default
	// 5): an event whose last delivery fails (handler error, or the
	// replica's predicate refusing it) goes to the stage's dead-letter
	// stream with its error instead of being redelivered.
	MaxDeliver int `yaml:"maxDeliver"`
	// Idempotent says that handling an event twice does no harm (request
	// mode): a request whose replica stops answering while it waits for
	// the verdict is sent once to another replica instead of being
	// rejected (see SinkStats.Failovers).
	Idempotent bool `yaml:"idempotent"`
}

// Section names: the cluster block of `global:` and the remote block of a
// stage.
const (
	clusterSection = "cluster"
	remoteSection  = "remote"
)

func init() {
	stage.RegisterSection(clusterSection, stage.SectionFunc(func(d stage.Decoder) (any, error) {
		if !d.Present() {
			return nil, nil // a null cluster block: no cluster, as if absent
		}
		return decodeCluster(d)
	}))
	stage.RegisterStageSection(remoteSection, stage.SectionFunc(func(d stage.Decoder) (any, error) {
		if !d.Present() {
			return nil, nil
		}
		return decodeStage(d)
	}))
}

func decodeCluster(d stage.Decoder) (ClusterConfig, error) {
	var c ClusterConfig
	if err := d.Decode(&c); err != nil {
		return c, err
	}
	tls := d.Key("tls")
	switch {
	case c.TLS.Cert != "" && c.TLS.Key == "":
		return c, tls.Errorf("cert %q without key", c.TLS.Cert)
	case c.TLS.Key != "" && c.TLS.Cert == "":
		return c, tls.Errorf("key %q without cert", c.TLS.Key)
	}
	for _, f := range []struct{ key, file string }{{"cert", c.TLS.Cert}, {"key", c.TLS.Key}, {"ca", c.TLS.CA}} {
		if f.file == "" {
			continue
		}
		if _, err := os.Stat(f.file); err != nil {
			return c, tls.Key(f.key).Errorf("%v", err)
		}
	}
	if c.TokenFile != "" {
		if _, err := readToken(c.TokenFile); err != nil {
			return c, d.Key("tokenFile").Errorf("%v", err)
		}
	}
	if c.NKeyFile != "" {
		if _, err := readNKey(c.NKeyFile); err != nil {
			return c, d.Key("nkeyFile").Errorf("%v", err)
		}
	}
	if c.CredsFile != "" {
		if _, err := os.Stat(c.CredsFile); err != nil {
			return c, d.Key("credsFile").Errorf("%v", err)
		}
	}
	if err := c.Validate(); err != nil {
		return c, d.Errorf("%v", err)
	}
	return c, nil
}

// decodeStage decodes and checks a stage's remote block.
func decodeStage(d stage.Decoder) (StageConfig, error) {
	var r StageConfig
	if err := d.Decode(&r); err != nil {
		return r, err
	}
	switch r.Mode {
	case "", ModeRequest, ModeDurable:
	default:
		return r, d.Key("mode").Errorf("unknown remote mode %q (known: request, durable)", r.Mode)
	}
	switch {
	case r.Timeout < 0:
		return r, d.Key("timeout").Errorf("negative duration %v", r.Timeout)
	case r.Retries < -1:
		return r, d.Key("retries").Errorf("retries %d below -1", r.Retries)
	case r.Duplicates < 0:
		return r, d.Key("duplicates").Errorf("negative duration %v", r.Duplicates)
	case r.NakDelay < 0:
		return r, d.Key("nakDelay").Errorf("negative duration %v", r.NakDelay)
	case r.MaxDeliver < 0:
		return r, d.Key("maxDeliver").Errorf("maxDeliver %d is negative (0: the default, 5)", r.MaxDeliver)
	}
	return r, nil
}

// ClusterFrom returns the configuration's `global.cluster` block, as the
// load decoded it, and false if it has none (one process, no NATS).
func ClusterFrom(cfg *stage.Config) (ClusterConfig, bool, error) {
	v, ok := cfg.Global.Section(clusterSection)
	if !ok {
		return ClusterConfig{}, false, nil
	}
	c, ok := v.(ClusterConfig)
	if !ok {
		return ClusterConfig{}, true, fmt.Errorf("%w: section %s holds a %T, not a remote.ClusterConfig", stage.ErrInvalidConfig, clusterSection, v)
	}
	return c, true, nil
}

// StageConfigOf returns a stage's remote block with defaults applied (all
// defaults if it has none).
func StageConfigOf(sc *stage.StageConfig) StageConfig {
	var r StageConfig
	if v, ok := sc.Section(remoteSection); ok {
		r, _ = v.(StageConfig)
	}
	return r.withDefaults()
}

// withDefaults returns r with its zero fields filled in.
func (r StageConfig) withDefaults() StageConfig {
	if r.Mode == "" {
		r.Mode = ModeRequest
	}
	if r.Timeout == 0 {
		if r.Mode == ModeDurable {
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
	if r.MaxDeliver == 0 {
		r.MaxDeliver = 5
	}
	return r
}
