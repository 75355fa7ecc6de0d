package profiler_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// get returns the status and body of GET url.
func aget(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitStatus polls url until it answers want (the condition, not the
// time, decides; the deadline only ends a hung test).
func waitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := aget(t, url)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q, want %d", url, code, body, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const adminDoc = `global:
  profiler: {http: "127.0.0.1:0", interval: 1h}
  shutdown: 20s
stages:
  Front:
    handler: app.Hold
    queue: {threshold: 100}
    predicate: {type: rate, rate: 500}
    args:
      password: hunter2
      apiToken: tok-SECRET
      tokenFile: /run/secrets/token
      tls: {cert: /etc/cert.pem, key: /etc/key-SECRET.pem}
      nats: {url: "nats://x", credentials: [a-SECRET, b-SECRET]}
      greeting: hello
`

// TestAdminEndpointsLibraryApp: an application that loads a YAML file
// whose global.profiler.http is set gets /healthz, /readyz and /config on
// the profiler's port; /readyz turns 503 once Shutdown begins draining,
// while /healthz stays 200; /config shows the configuration with every
// secret redacted.
func TestAdminEndpointsLibraryApp(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	reg := stage.NewRegistry()
	reg.Register("app.Hold", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error {
			entered <- struct{}{}
			<-release
			return nil
		})
	})
	m, err := stage.Parse([]byte(adminDoc), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc, ok := m.Service("profiler")
	if !ok {
		t.Fatal("no profiler service")
	}
	base := "http://" + svc.(*profiler.Profiler).Addr().String()

	if code, body := aget(t, base+profiler.HealthzPath); code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, body := aget(t, base+profiler.ReadyzPath); code != 200 {
		t.Errorf("readyz while serving: %d %q", code, body)
	}
	code, body := aget(t, base+profiler.ConfigPath)
	if code != 200 {
		t.Fatalf("config: %d %q", code, body)
	}
	for _, secret := range []string{"hunter2", "SECRET", "/run/secrets/token"} {
		if strings.Contains(body, secret) {
			t.Errorf("config shows %q:\n%s", secret, body)
		}
	}
	var doc struct {
		Global struct {
			Profiler struct{ HTTP string }
			Shutdown string
		}
		Stages map[string]struct {
			Queue     struct{ Threshold int }
			Predicate map[string]any
			Args      map[string]any
		}
	}
	if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("config is not YAML: %v\n%s", err, body)
	}
	front := doc.Stages["Front"]
	if doc.Global.Profiler.HTTP != "127.0.0.1:0" || doc.Global.Shutdown != "20s" ||
		front.Queue.Threshold != 100 || front.Predicate["rate"] != 500 ||
		front.Args["greeting"] != "hello" || front.Args["password"] != profiler.Redacted {
		t.Errorf("config lacks the file's values: %+v\n%s", doc, body)
	}

	var args map[string]any
	if err := m.Config().Stages[0].Config.Args.Decode(&args); err != nil || args["password"] != "hunter2" {
		t.Errorf("after /config, the stage's args read %+v, %v: redaction touched the configuration", args, err)
	}

	// Draining: a handler holds an event, so Shutdown stays in its drain.
	fs, _ := m.Stage("Front")
	if err := fs.Sink().Enqueue(1); err != nil {
		t.Fatal(err)
	}
	<-entered
	done := make(chan error, 1)
	go func() { done <- m.Shutdown(context.Background()) }()
	if body := waitStatus(t, base+profiler.ReadyzPath, 503); !strings.Contains(body, "draining") {
		t.Errorf("readyz while draining: %q", body)
	}
	if code, _ := aget(t, base+profiler.HealthzPath); code != 200 {
		t.Errorf("healthz while draining: %d", code)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadyzAfterGiveUp: /readyz answers 503, naming the supervisor, once
// a root supervisor has given up, and Drain makes it 503 as well.
func TestReadyzAfterGiveUp(t *testing.T) {
	m := stage.NewManager(stage.Options{After: func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}})
	st, err := m.CreateSupervised("S", func() stage.Handler {
		return stage.HandlerFunc(func([]sink.Event) error { panic("crash") })
	}, stage.StageConfig{
		Supervisor: &stage.SupervisorConfig{MaxRestarts: 1, Period: time.Hour, OnGiveUp: stage.GiveUpStop},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if code, _ := aget(t, "http://"+mustStart(t, p)+profiler.ReadyzPath); code != 503 {
		t.Errorf("readyz before the manager starts: %d, want 503", code)
	}
	start(t, m)
	base := "http://" + p.Addr().String()
	if code, body := aget(t, base+profiler.ReadyzPath); code != 200 {
		t.Fatalf("readyz: %d %q", code, body)
	}
	for i := 0; ; i++ {
		_ = st.Sink().Enqueue(i)
		select {
		case <-m.Done():
		case <-time.After(time.Millisecond):
			continue
		}
		break
	}
	if !errors.Is(m.Err(), stage.ErrGaveUp) {
		t.Fatalf("manager stopped with %v, want ErrGaveUp", m.Err())
	}
	code, body := aget(t, base+profiler.ReadyzPath)
	if code != 503 || !strings.Contains(body, "gave up") || !strings.Contains(body, `"S"`) {
		t.Errorf("readyz after give-up: %d %q", code, body)
	}
	if code, _ := aget(t, base+profiler.HealthzPath); code != 200 {
		t.Errorf("healthz after give-up: %d", code)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestReadyzDrain: Drain turns /readyz to 503 on a running manager.
func TestReadyzDrain(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	start(t, m)
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	base := "http://" + mustStart(t, p)
	defer p.Close()
	if code, _ := aget(t, base+profiler.ReadyzPath); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	p.Drain()
	if code, body := aget(t, base+profiler.ReadyzPath); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("readyz after Drain: %d %q", code, body)
	}
	code, body := aget(t, base+profiler.ConfigPath)
	if code != 200 || !strings.Contains(body, "built in Go") || !strings.Contains(body, "http: 127.0.0.1:0") {
		t.Errorf("config of a manager built in Go: %d\n%s", code, body)
	}
}

func mustStart(t *testing.T, p *profiler.Profiler) string {
	t.Helper()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p.Addr().String()
}

func TestIsSecretKey(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "Password": true, "db_password": true, "passwd": true,
		"secret": true, "clientSecret": true, "token": true, "tokenFile": true,
		"apiToken": true, "key": true, "api_key": true, "apiKey": true, "TLSKey": true,
		"private-key": true, "credentials": true, "auth": true,
		"nkeyFile": true, "credsFile": true,
		"keyed": false, "monkey": false, "keys": false, "tokenizer": false, "cert": false,
		"root": false, "http": false, "author": false, "": false,
	} {
		if got := profiler.IsSecretKey(name); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", name, got, want)
		}
	}
}
