package arashi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandstorm-go/sandstorm/configs"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// DefaultPredicate is the admission block of every request-type stage in
// configs/arashi.yaml; Config.Predicate replaces it.
const DefaultPredicate = "{type: rt, target: 250ms}"

// Config configures Start. Zero fields take the defaults shown.
type Config struct {
	// YAML is the stage graph (default configs/arashi.yaml), reported under
	// File in errors.
	YAML []byte
	File string
	// Predicate, if set, replaces every request-type stage's admission
	// block (DefaultPredicate) — "{type: threshold, limit: 1000000}" for
	// no control, "{type: multiclass, targets: {0: 1s, 1: 1s}}" for two
	// classes, ... It is how the experiments switch control.
	Predicate string
	// DB is the database file; "" makes a fresh one in a temporary
	// directory, removed by Shutdown. An empty database is generated.
	DB    string
	Users int    // users generated into an empty database (default 64)
	Seed  uint64 // the generator's seed
	// MaxFolder is the largest generated Inbox (default MaxFolder).
	MaxFolder int
	Pool      int // database connections (default 4)
	// Degrade selects service degradation (thesis Figs. 56–57); it needs
	// the rt predicates (DefaultPredicate).
	Degrade Degrade
	// Addr overrides the listen address (127.0.0.1:8081; port 0: any).
	Addr string
	// Profiler, if set, overrides global.profiler.http: the admin address
	// serving the dashboard, /metrics, /healthz, /readyz, /config and
	// /debug/pprof/ (port 0: any; see Service.Profiler).
	Profiler string
	Logger   *slog.Logger
}

// Service is a running Arashi: the mail store, the App and the stage
// manager.
type Service struct {
	DB      *DB
	App     *App
	Manager *stage.Manager
	Gen     GenStats // what Start generated (zero if the database had users)
	tmp     string
	prof    *profiler.Profiler
}

// Start opens (and, if empty, generates) the database, builds the stage
// graph and starts it. Shut the Service down with Shutdown.
func Start(ctx context.Context, cfg Config) (svc *Service, err error) {
	if cfg.YAML == nil {
		cfg.YAML, cfg.File = configs.Arashi, configs.ArashiFile
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	path := cfg.DB
	if path == "" {
		if s.tmp, err = os.MkdirTemp("", "arashi-db-"); err != nil {
			return nil, err
		}
		path = filepath.Join(s.tmp, "arashi.db")
	}
	if s.DB, err = Open(path, DBConfig{Pool: cfg.Pool}); err != nil {
		return nil, err
	}
	var n int
	if err := s.DB.sql.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		return nil, err
	}
	if n == 0 {
		if s.Gen, err = Generate(ctx, s.DB, GenConfig{Users: cfg.Users, Seed: cfg.Seed, MaxFolder: cfg.MaxFolder}); err != nil {
			return nil, err
		}
		cfg.Logger.Info("arashi: generated the mail store", "db", path, "users", s.Gen.Users,
			"messages", s.Gen.Messages, "largest folder", s.Gen.Largest, "took", s.Gen.Elapsed.Round(1e6))
	}
	if !s.DB.FullText() {
		cfg.Logger.Warn("arashi: the SQLite driver has no FTS5; search scans messages")
	}
	data := string(cfg.YAML)
	if cfg.Predicate != "" {
		if !strings.Contains(data, "predicate: "+DefaultPredicate) {
			return nil, fmt.Errorf("arashi: %s has no %q to replace", cfg.File, DefaultPredicate)
		}
		data = strings.ReplaceAll(data, "predicate: "+DefaultPredicate, "predicate: "+cfg.Predicate)
	}
	if s.App, err = New(Options{DB: s.DB, Addr: cfg.Addr, Logger: cfg.Logger, Degrade: cfg.Degrade}); err != nil {
		return nil, err
	}
	reg := stage.NewRegistry()
	s.App.Register(reg)
	scfg, err := stage.ParseConfig([]byte(data), cfg.File)
	if err != nil {
		return nil, err
	}
	if s.Manager, err = stage.NewFromConfig(scfg, reg, stage.Options{Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	pcfg, err := profiler.ConfigFrom(s.Manager)
	if err != nil {
		return nil, err
	}
	if cfg.Profiler != "" {
		pcfg.HTTP = cfg.Profiler
	}
	if s.prof, err = profiler.New(s.Manager, pcfg, cfg.Logger); err != nil {
		return nil, err
	}
	if err = s.Manager.Start(context.Background()); err != nil {
		return nil, err
	}
	if err = s.prof.Start(context.Background()); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.App.Shutdown(sctx)
		_ = s.Manager.Shutdown(sctx)
		return nil, fmt.Errorf("arashi: profiler: %w", err)
	}
	return s, nil
}

// Shutdown stops the HTTP server (finishing the responses it owes), then
// the stages, then closes the database and removes a temporary one.
func (s *Service) Shutdown(ctx context.Context) error {
	if s.prof != nil {
		s.prof.Drain() // /readyz: 503 from the start of the shutdown
	}
	var errs []error
	if s.App != nil {
		errs = append(errs, s.App.Shutdown(ctx))
	}
	if s.Manager != nil {
		errs = append(errs, s.Manager.Shutdown(ctx))
	}
	if s.prof != nil {
		errs = append(errs, s.prof.Shutdown(ctx))
	}
	errs = append(errs, s.close())
	return errors.Join(errs...)
}

// Profiler returns the service's profiler: its Addr is the admin port
// (Addr is nil when neither global.profiler.http nor Config.Profiler
// sets one).
func (s *Service) Profiler() *profiler.Profiler { return s.prof }

func (s *Service) close() error {
	var errs []error
	if s.App != nil {
		errs = append(errs, s.App.Close())
		s.App = nil
	}
	if s.DB != nil {
		errs = append(errs, s.DB.Close())
		s.DB = nil
	}
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
		s.tmp = ""
	}
	return errors.Join(errs...)
}
