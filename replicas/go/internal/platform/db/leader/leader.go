// Package leader elects one background leader per deployment with a PostgreSQL session
// advisory lock, as the reference page harness/spec/background-leader.md describes it: every
// replica runs one Elector; the replica whose Elector holds pg_try_advisory_lock(1886156915, 1)
// leads, every other one is a standby and tries the lock again every CheckInterval.
//
// It is the page's design, written from the page alone (its names: New, Config, Elector.Run,
// Term, Do, IsLeader, ErrNilPool, ErrLeadershipLost, DefaultCheckInterval), on the driver the
// page names (pgx, here v4 as Debian ships it) so that the harness can judge that design beside
// the Rust elector. It deliberately has none of the Rust elector's additions beyond the page
// (no lease, no shared-session guard, no fencing). Where the driver or the replica contract
// forces a difference from the page, a comment starting with "Differs from the page:" says so
// (docs/replica-contract.md lists them too).
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCheckInterval is the CheckInterval used when Config gives none.
const DefaultCheckInterval = 5 * time.Second

// The lock key: 1886156915 is 0x706C7873, ASCII plxs, in the two-int4 form.
const (
	lockClassID = 1886156915
	lockObjID   = 1
)

// unlockTimeout bounds the unlock on cancellation; its context outlives Run's.
const unlockTimeout = 2 * time.Second

// GaugeName is the page's metric: 1 while the replica leads, 0 otherwise.
const GaugeName = "plexsphere_background_leader"

var (
	// ErrNilPool is returned by New when Config.Pool is nil.
	ErrNilPool = errors.New("leader: nil pool")
	// ErrLeadershipLost is the cause of a term context that ended because the replica
	// stopped leading.
	ErrLeadershipLost = errors.New("leader: leadership lost")
	// errStopped is the cause of a term ended by Run's cancellation (the release).
	errStopped = errors.New("leader: election stopped")
)

// Config configures an Elector.
type Config struct {
	// Pool supplies the connections the lock is tried on. Required.
	Pool *pgxpool.Pool
	// CheckInterval is how often a standby tries the lock and the leader verifies it, and
	// how long the leader's SELECT 1 may take. Zero or negative: DefaultCheckInterval.
	CheckInterval time.Duration
	// Logger receives acquisition, loss and failure lines. Nil: slog.Default().
	Logger *slog.Logger
	// Registerer receives the plexsphere_background_leader gauge. Nil: no gauge.
	Registerer prometheus.Registerer
}

// term is one period of leadership.
type term struct {
	number int64
	ctx    context.Context
	end    context.CancelCauseFunc
}

// Elector takes part in the election. Build it with New.
type Elector struct {
	pool     *pgxpool.Pool
	interval time.Duration
	log      *slog.Logger
	gauge    prometheus.Gauge

	leading atomic.Bool
	mu      sync.Mutex
	current *term // nil while a standby
	terms   int64

	// conn is the hijacked connection that holds the lock; only Run touches it.
	conn *pgx.Conn
}

// New builds an Elector from cfg.
func New(cfg Config) (*Elector, error) {
	if cfg.Pool == nil {
		return nil, ErrNilPool
	}
	e := &Elector{pool: cfg.Pool, interval: cfg.CheckInterval, log: cfg.Logger}
	if e.interval <= 0 {
		e.interval = DefaultCheckInterval
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if cfg.Registerer != nil {
		g := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: GaugeName,
			Help: "1 while this replica leads, 0 otherwise.",
		})
		if err := cfg.Registerer.Register(g); err != nil {
			// New reuses a gauge already registered on the same Registerer.
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, fmt.Errorf("leader: register %s: %w", GaugeName, err)
			}
			existing, ok := already.ExistingCollector.(prometheus.Gauge)
			if !ok {
				return nil, fmt.Errorf("leader: %s is registered and is not a gauge", GaugeName)
			}
			g = existing
		}
		g.Set(0)
		e.gauge = g
	}
	return e, nil
}

// IsLeader reports whether the replica holds the lock. Safe from any goroutine.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

type termKey struct{}

// TermNumber returns the number of the term whose context ctx is (or descends from): 1 for
// the first term this Elector led, and so on; 0 outside a term.
//
// Differs from the page: the page numbers no terms. The replica contract's leader-only work
// rows (leader_work.term) name the term they were written in, so the term's context carries
// its number.
func TermNumber(ctx context.Context) int64 {
	n, _ := ctx.Value(termKey{}).(int64)
	return n
}

// Term returns a context, its cancel function and whether the replica leads. On the leader
// the context ends when parent ends or when leadership ends, whichever comes first, and after
// a loss context.Cause returns ErrLeadershipLost. On a standby the context is already
// cancelled. Always call the cancel function.
func (e *Elector) Term(parent context.Context) (context.Context, context.CancelFunc, bool) {
	e.mu.Lock()
	t := e.current
	e.mu.Unlock()
	ctx, cancel := context.WithCancelCause(parent)
	if t == nil {
		cancel(ErrLeadershipLost)
		return ctx, func() {}, false
	}
	ctx = context.WithValue(ctx, termKey{}, t.number)
	stop := context.AfterFunc(t.ctx, func() { cancel(context.Cause(t.ctx)) })
	return ctx, func() { stop(); cancel(context.Canceled) }, true
}

// Do runs one unit of background work on the leader: not at all on a standby (false, nil);
// on the leader (true, fn's error), or (false, nil) when leadership was lost while fn ran and
// ctx is still live. fn receives the term context. A demotion never counts as a failed tick.
func (e *Elector) Do(ctx context.Context, fn func(context.Context) error) (bool, error) {
	tctx, cancel, ok := e.Term(ctx)
	defer cancel()
	if !ok {
		return false, nil
	}
	err := fn(tctx)
	if ctx.Err() == nil && errors.Is(context.Cause(tctx), ErrLeadershipLost) {
		e.log.Info("leader: leadership lost while work ran", "term", TermNumber(tctx), "err", err)
		return false, nil
	}
	return true, err
}

// Run takes part in the election until ctx is cancelled: it checks once when it starts and
// then every CheckInterval. On cancellation it unlocks under a 2-second context that outlives
// ctx, closes the connection, ends the term and returns nil. Never run two Run calls at once.
func (e *Elector) Run(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			// A panic may have left the connection mid-query: close it, no unlock; the
			// server releases the lock when the session ends.
			if e.conn != nil {
				closeNow(e.conn)
				e.conn = nil
				e.log.Warn("background leader lock abandoned after a panic")
			}
			e.endTerm(ErrLeadershipLost)
			panic(r)
		}
	}()
	e.check(ctx)
	ticker := time.NewTicker(e.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			e.release(ctx)
			return nil
		case <-ticker.C:
			e.check(ctx)
		}
	}
}

func (e *Elector) check(ctx context.Context) {
	if e.conn == nil {
		e.standbyCheck(ctx)
	} else {
		e.leaderCheck()
	}
}

// standbyCheck acquires a pooled connection and tries the lock on it: refused, the
// connection goes back to the pool unchanged; granted, it is hijacked out of the pool, its
// idle_session_timeout is set to four intervals, and a new term begins.
func (e *Elector) standbyCheck(ctx context.Context) {
	// Differs from the page: the page bounds only the leader's SELECT 1. A standby's check
	// here has the same bound, one interval, so that a check into a dead network cannot stall
	// the election past its next check (the Python example bounds it the same way).
	cctx, cancel := context.WithTimeout(ctx, e.interval)
	defer cancel()
	pc, err := e.pool.Acquire(cctx)
	if err != nil {
		e.log.Warn("leader: acquire lock connection: " + err.Error())
		return
	}
	var granted bool
	err = pc.QueryRow(cctx, fmt.Sprintf("SELECT pg_try_advisory_lock(%d, %d)", lockClassID, lockObjID)).
		Scan(&granted)
	if err != nil {
		// The query failed: its answer may have been a grant that never arrived, so the
		// connection is closed now (see closeNow), and the pool drops it on release.
		closeNow(pc.Conn())
		pc.Release()
		e.log.Warn("leader: acquire lock connection: " + err.Error())
		return
	}
	if !granted {
		pc.Release() // back to the pool unchanged
		return
	}
	conn := pc.Hijack()
	// The orphaned-session bound, as soon as the lock is granted: a second statement on the
	// hijacked connection, as the page describes it.
	bound := 4 * e.interval.Milliseconds()
	if _, err := conn.Exec(cctx, fmt.Sprintf("SET idle_session_timeout = %d", bound)); err != nil {
		// Differs from the page, which says nothing of a failed SET: a lock session without
		// its bound is not kept (it could orphan the lock for hours); closing it releases the
		// lock, and the replica stays a standby. On PostgreSQL 13, which has no
		// idle_session_timeout, this replica therefore never leads.
		closeNow(conn)
		e.log.Warn("leader: acquire lock connection: set idle_session_timeout: " + err.Error())
		return
	}
	e.conn = conn
	n := e.beginTerm()
	e.log.Info("background leader lock acquired", "term", n, "backend_pid", conn.PgConn().PID())
}

// leaderCheck runs SELECT 1 on the held connection with a deadline of one interval; an error
// or no answer in time demotes the replica.
func (e *Elector) leaderCheck() {
	// The check is not cut short by Run's cancellation: a cancellation is a release, not a
	// failed check.
	cctx, cancel := context.WithTimeout(context.Background(), e.interval)
	defer cancel()
	var one int
	if err := e.conn.QueryRow(cctx, "SELECT 1").Scan(&one); err != nil {
		e.demote(err)
	}
}

// demote: ends the term with ErrLeadershipLost, closes the connection, logs WARN with the
// ping error.
func (e *Elector) demote(cause error) {
	e.endTerm(ErrLeadershipLost)
	closeNow(e.conn)
	e.conn = nil
	e.log.Warn("background leader lock lost: " + cause.Error())
}

// release: pg_advisory_unlock under a 2-second context that outlives ctx, close, end the term.
func (e *Elector) release(ctx context.Context) {
	if e.conn == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	var unlocked bool
	err := e.conn.QueryRow(uctx, fmt.Sprintf("SELECT pg_advisory_unlock(%d, %d)", lockClassID, lockObjID)).
		Scan(&unlocked)
	n := e.terms
	if err == nil {
		_ = e.conn.Close(uctx) // a Terminate, then the socket
	} else {
		closeNow(e.conn)
	}
	e.conn = nil
	e.endTerm(errStopped)
	switch {
	case err != nil:
		e.log.Info("background leader lock not unlocked ("+err.Error()+"); the close ends the session", "term", n)
	case !unlocked:
		e.log.Info("background leader lock not unlocked (the server held no such lock); the close ends the session", "term", n)
	default:
		e.log.Info("background leader lock released", "term", n)
	}
}

func (e *Elector) beginTerm() int64 {
	ctx, end := context.WithCancelCause(context.Background())
	e.mu.Lock()
	e.terms++
	e.current = &term{number: e.terms, ctx: ctx, end: end}
	n := e.terms
	e.mu.Unlock()
	e.leading.Store(true)
	if e.gauge != nil {
		e.gauge.Set(1)
	}
	return n
}

// endTerm cancels every Term context and Do in flight with cause, turns IsLeader false and
// sets the gauge to 0.
func (e *Elector) endTerm(cause error) {
	e.mu.Lock()
	t := e.current
	e.current = nil
	e.mu.Unlock()
	e.leading.Store(false)
	if e.gauge != nil {
		e.gauge.Set(0)
	}
	if t != nil {
		t.end(cause)
	}
}

// closeNow closes a connection at once: its socket first, then pgx's own bookkeeping.
//
// Differs from the page only in how "closes the connection" is done: pgx v4's Close on a
// connection whose query failed (an error, or a context deadline) returns at once but leaves
// the socket open behind a background cancel request, for up to 15 s when the network is cut;
// the session, and the lock on it, would stay that long. Closing the socket first ends the
// session as soon as the server sees it.
func closeNow(conn *pgx.Conn) {
	_ = conn.PgConn().Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = conn.Close(ctx)
}
