// Command replica is a background-leader replica built on the reference page's design
// (package leader: pgx pool, hijack on grant, SELECT 1 with a deadline), meeting the harness's
// replica contract at level 2 (docs/replica-contract.md): a process, its lock row, /metrics
// with the gauge, /readyz, and a row in leader_work for each pass of its leader-only work. It
// takes the same environment as the Python example (replicas/python/replica.py):
//
//	PLEXSPHERE_DSN             the database (absent: no elector, no background loop, LOOP-4)
//	REPLICA_NAME               its name, also every connection's application_name
//	REPLICA_HTTP               the HTTP listen address (127.0.0.1:PORT)
//	REPLICA_CHECK_INTERVAL_MS  T, the CheckInterval, in milliseconds
//	REPLICA_POOL_MAX_LIFETIME_MS  the pool retires a connection older than this (SESS-1)
//
// SIGTERM (or SIGINT) cancels the election: the leader unlocks under a 2 s deadline, closes
// the connection and ends its term, and the process exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"plexsphere/internal/platform/db/leader"
)

// poolSize is the pool's MaxConns, as the Python example's pool.
const poolSize = 4

// work is one pass of leader-only work made visible (the contract's level 2).
const work = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', $1, $2)"

type settings struct {
	dsn, name, listen string
	checkInterval     time.Duration // as told: zero or negative asks the elector's default
	interval          time.Duration // the one in force, which the loops tick at
	poolMaxLifetime   time.Duration // 0: pgxpool's default
}

func fromEnv() settings {
	s := settings{
		dsn:    os.Getenv("PLEXSPHERE_DSN"),
		name:   os.Getenv("REPLICA_NAME"),
		listen: os.Getenv("REPLICA_HTTP"),
	}
	if s.name == "" {
		s.name = "replica"
	}
	if s.listen == "" {
		s.listen = "127.0.0.1:8080"
	}
	ms, err := strconv.Atoi(os.Getenv("REPLICA_CHECK_INTERVAL_MS"))
	if err != nil {
		ms = 0
	}
	// Told 0, the elector uses its own default (CFG-2), and so do the loops.
	s.checkInterval = time.Duration(ms) * time.Millisecond
	s.interval = s.checkInterval
	if s.interval <= 0 {
		s.interval = leader.DefaultCheckInterval
	}
	if life, err := strconv.Atoi(os.Getenv("REPLICA_POOL_MAX_LIFETIME_MS")); err == nil && life > 0 {
		s.poolMaxLifetime = time.Duration(life) * time.Millisecond
	}
	return s
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
}

func run() error {
	s := fromEnv()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", s.name)
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	registry := prometheus.NewRegistry()
	var elector *leader.Elector
	var pool *pgxpool.Pool
	if s.dsn != "" {
		cfg, err := pgxpool.ParseConfig(s.dsn)
		if err != nil {
			return fmt.Errorf("PLEXSPHERE_DSN: %w", err)
		}
		// Level 0 of the contract: every connection names its replica.
		cfg.ConnConfig.RuntimeParams["application_name"] = s.name
		cfg.ConnConfig.ConnectTimeout = max(s.interval, time.Second)
		cfg.MaxConns = poolSize
		if s.poolMaxLifetime > 0 {
			// pgxpool retires a connection past its lifetime when it is given back, and idle
			// ones at each health check: check as often as the lifetime, so SESS-1's short
			// lifetime is felt within the run.
			cfg.MaxConnLifetime = s.poolMaxLifetime
			cfg.HealthCheckPeriod = s.poolMaxLifetime
		}
		// The pool starts empty: pgxpool.Connect would open a first connection at once and
		// fail the boot when the database is down, where the page's Run logs a failed acquire
		// and tries again at its next check.
		cfg.LazyConnect = true
		pool, err = pgxpool.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		elector, err = leader.New(leader.Config{
			Pool:          pool,
			CheckInterval: s.checkInterval,
			Logger:        log,
			Registerer:    registry,
		})
		if err != nil {
			return err
		}
	} else {
		// LOOP-4: no DSN, no elector, no background loop; the gauge still answers 0.
		g := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: leader.GaugeName,
			Help: "1 while this replica leads, 0 otherwise.",
		})
		registry.MustRegister(g)
		log.Info("no PLEXSPHERE_DSN: no elector, no background loop")
	}

	server, err := serve(s.listen, registry)
	if err != nil {
		return err
	}

	if elector != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			leaderTicker(ctx, elector, pool, s)
		}()
		if err := elector.Run(ctx); err != nil {
			log.Error("background-leader: " + err.Error())
		}
		wg.Wait()
		pool.Close()
	} else {
		<-ctx.Done()
	}
	shut, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = server.Shutdown(shut)
	log.Info("shut down")
	return nil
}

// leaderTicker is the page's runLeaderTicker for one loop: every interval it asks Do, and on
// the leader one pass inserts a row into leader_work on a pooled connection, under the term's
// context and a deadline of one interval.
func leaderTicker(ctx context.Context, e *leader.Elector, pool *pgxpool.Pool, s settings) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		_, err := e.Do(ctx, func(tctx context.Context) error {
			wctx, cancel := context.WithTimeout(tctx, s.interval)
			defer cancel()
			_, err := pool.Exec(wctx, work, s.name, leader.TermNumber(tctx))
			return err
		})
		if err != nil && ctx.Err() == nil {
			slog.Warn("background loop tick failed", "loop", "sweep", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// serve answers /metrics (the registry, Prometheus text) and /readyz (200 once serving).
func serve(listen string, registry *prometheus.Registry) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": true, "checks": []string{}})
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", listen, err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http: " + err.Error())
		}
	}()
	return server, nil
}
