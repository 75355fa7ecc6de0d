package remote_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/stage"
)

// userSeed writes a new NKey user seed to a file and returns the file.
func userSeed(t *testing.T, name string) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, name, string(seed)+"\n")
}

// TestNKeyRequiredAndSigned: with nkeyFile the embedded server admits only
// the seed's user; every node signs with it; a client without it, or with
// another user's seed, is refused at once.
func TestNKeyRequiredAndSigned(t *testing.T) {
	seed := userSeed(t, "cluster.nk")
	url := securedPair(t, func(cc *remote.ClusterConfig) { cc.NKeyFile = seed })
	if err := plainConnect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a client without the nkey: %v, want an authorization violation", err)
	}
	opt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := plainConnect(url, opt); err != nil {
		t.Fatalf("a client signing with the seed: %v", err)
	}
	other := userSeed(t, "other.nk")
	start := time.Now()
	if _, err := remote.Join(remote.ClusterConfig{Node: "c", NATS: url, NKeyFile: other}, remote.Options{}); err == nil {
		t.Fatal("a node with another user's seed joined")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("refusal took %v: the node waited as if the server were down", time.Since(start))
	}
}

func TestAuthConfigErrors(t *testing.T) {
	seed := userSeed(t, "ok.nk")
	notSeed := writeFile(t, "junk.nk", "SUNOTASEED\n")
	token := writeFile(t, "token", "t0ken")
	creds := writeFile(t, "user.creds", "not checked before the server asks\n")
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name string
		cc   remote.ClusterConfig
		want string // in the error
	}{
		{"not an nkey seed", remote.ClusterConfig{Node: "a", NKeyFile: notSeed}, notSeed},
		{"missing nkey file", remote.ClusterConfig{Node: "a", NKeyFile: missing}, missing},
		{"token and nkey", remote.ClusterConfig{Node: "a", TokenFile: token, NKeyFile: seed}, "exclude each other"},
		{"creds with the embedded server", remote.ClusterConfig{Node: "a", CredsFile: creds}, "external NATS server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := remote.Join(tc.cc, remote.Options{})
			if err == nil {
				n.Close()
				t.Fatal("joined")
			}
			if !errors.Is(err, stage.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a config error with %q", err, tc.want)
			}
		})
	}
}

// TestNKeyFromYAML: the keys decode, and a bad file is an error naming
// the key.
func TestNKeyFromYAML(t *testing.T) {
	seed := userSeed(t, "ok.nk")
	for _, tc := range []struct {
		yaml, wantErr string
	}{
		{"global:\n  cluster: {node: a, nkeyFile: " + seed + "}\n", ""},
		{"global:\n  cluster: {node: a, nkeyFile: /nonexistent/nk}\n", "nkeyFile"},
		{"global:\n  cluster: {node: a, nats: 'nats://127.0.0.1:4222', credsFile: /nonexistent/creds}\n", "credsFile"},
	} {
		cfg, err := stage.ParseConfig([]byte(tc.yaml+"stages:\n  W:\n    handler: t.Work\n"), "c.yaml")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want an error on %s", tc.yaml, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		cc, _, err := remote.ClusterFrom(cfg)
		if err != nil || cc.NKeyFile != seed {
			t.Errorf("%q: %+v %v", tc.yaml, cc, err)
		}
	}
}

// TestCredsFileJoinsAnOperatorServer: a NATS server in operator mode
// (decentralized JWT authentication, as a production NATS deployment
// runs) admits a node presenting a user's creds file and refuses one
// without.
func TestCredsFileJoinsAnOperatorServer(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	account, err := nkeys.CreateAccount()
	must(err)
	user, err := nkeys.CreateUser()
	must(err)
	opub, _ := operator.PublicKey()
	apub, _ := account.PublicKey()
	upub, _ := user.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(operator)
	must(err)
	ajwt, err := jwt.NewAccountClaims(apub).Encode(operator)
	must(err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(account)
	must(err)
	useed, err := user.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	must(err)
	credsFile := writeFile(t, "user.creds", string(creds))

	oc, err := jwt.DecodeOperatorClaims(ojwt)
	must(err)
	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver})
	must(err)
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	n, err := remote.Join(remote.ClusterConfig{Node: "w", NATS: srv.ClientURL(), CredsFile: credsFile}, remote.Options{})
	if err != nil {
		t.Fatalf("a node with the creds file: %v", err)
	}
	n.Close()
	if n, err := remote.Join(remote.ClusterConfig{Node: "w", NATS: srv.ClientURL()}, remote.Options{}); err == nil {
		n.Close()
		t.Fatal("a node without creds joined an operator-mode server")
	}
}
