// The oracle: a superuser connection straight to PostgreSQL (DIRECT_PGPORT) that checks what the server
// saw, independently of pgmux and of the driver under test.
package main

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type oracle struct {
	env  *env
	pool *pgxpool.Pool
	err  error // set when the configuration itself is unusable
}

func newOracle(e *env) *oracle {
	o := &oracle{env: e}
	cfg, err := pgxpool.ParseConfig(e.url(e.directUser, e.directPassword, e.directPort,
		url.Values{"application_name": {"matrix-oracle"}}))
	if err != nil {
		o.err = fmt.Errorf("oracle: %w", err)
		return o
	}
	cfg.MaxConns = 3
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	// Connections are made on first use, so an unreachable server fails the scenarios that need it.
	o.pool, o.err = pgxpool.NewWithConfig(context.Background(), cfg)
	return o
}

func (o *oracle) close() {
	if o.pool != nil {
		o.pool.Close()
	}
}

// queryRow runs one oracle query; its errors say they came from the oracle, not the driver under test.
func (o *oracle) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if o.err != nil {
		return o.err
	}
	if err := o.pool.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		return fmt.Errorf("oracle (direct port %d): %w", o.env.directPort, err)
	}
	return nil
}

func (o *oracle) exec(ctx context.Context, sql string, args ...any) error {
	if o.err != nil {
		return o.err
	}
	if _, err := o.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("oracle (direct port %d): %w", o.env.directPort, err)
	}
	return nil
}

// backends counts the application user's pool connections: not the oracle's own, not pgmux's probe
// connection (pgmux-probe; see tests/drivers/README.md).
func (o *oracle) backends(ctx context.Context) (int, error) {
	var n int
	err := o.queryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE usename = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
		AND application_name IS DISTINCT FROM 'pgmux-probe'`,
		[]any{o.env.user}, &n)
	return n, err
}

// waitNoIdleInTransaction gives the server up to wait to settle, then fails if a backend of the application
// user is still idle in a transaction.
func (o *oracle) waitNoIdleInTransaction(wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		var n int
		err := o.queryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE usename = $1 AND state LIKE 'idle in transaction%'`, []any{o.env.user}, &n)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return fmt.Errorf("%d backend(s) of %s left idle in transaction", n, o.env.user)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitNoActive waits until no backend of the application user runs the query text, for a cancel that must
// reach the server.
func (o *oracle) waitNoActive(ctx context.Context, query string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var n int
		if err := o.queryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE usename = $1 AND state = 'active' AND query = $2`, []any{o.env.user, query}, &n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%q still running on the server %s after the client gave up", query, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitActive waits until a backend of the application user runs the query text, so that a cancel is
// sent while the query is really running; false if it never showed up within wait.
func (o *oracle) waitActive(ctx context.Context, query string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		var n int
		if err := o.queryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE usename = $1 AND state = 'active' AND query = $2`, []any{o.env.user, query}, &n); err != nil {
			return false
		}
		if n > 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// sampler polls the number of application backends until stopped and keeps the largest count seen.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	max     int
	samples int
	err     error
}

func (o *oracle) sampleBackends(ctx context.Context) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := o.backends(ctx)
			s.mu.Lock()
			if err != nil && s.err == nil {
				s.err = err
			}
			if err == nil {
				s.samples++
				s.max = max(s.max, n)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns the largest backend count it saw.
func (s *sampler) finish() (maxSeen, samples int, err error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.samples, s.err
}

// poolCheck applies the contract's bound on backends, or says why it does not apply.
func (o *oracle) poolCheck(maxSeen, samples int) (string, error) {
	if o.env.direct() {
		return fmt.Sprintf("pool check skipped (PGPORT is the direct port; %d backends)", maxSeen), nil
	}
	if samples == 0 {
		return "", fmt.Errorf("oracle took no sample of pg_stat_activity")
	}
	if maxSeen > o.env.poolMax {
		return "", fmt.Errorf("%d backends of %s at once, more than MATRIX_POOL_MAX=%d", maxSeen, o.env.user, o.env.poolMax)
	}
	return fmt.Sprintf("≤ %d backends (max seen %d over %d samples)", o.env.poolMax, maxSeen, samples), nil
}
