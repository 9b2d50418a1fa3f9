// What every scenario needs: the runner's environment, connections that are closed whatever happens, and
// failure messages that carry the SQLSTATE.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// env is the contract between the runner and a suite (tests/drivers/README.md).
type env struct {
	host, user, password, database string
	port                           int
	socketDir                      string
	directPort                     int
	directUser, directPassword     string
	clients, txns, poolMax         int
	timeout                        time.Duration
}

func loadEnv() (*env, error) {
	var errs []error
	str := func(key, def string) string {
		if v, ok := os.LookupEnv(key); ok && v != "" {
			return v
		}
		return def
	}
	num := func(key string, def int) int {
		v := str(key, strconv.Itoa(def))
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive integer", key, v))
		}
		return n
	}
	e := &env{
		host:           str("PGHOST", "127.0.0.1"),
		port:           num("PGPORT", 5432),
		socketDir:      str("MATRIX_SOCKET_DIR", "/tmp"),
		user:           str("PGUSER", "pgmux_app"),
		password:       str("PGPASSWORD", ""),
		database:       str("PGDATABASE", "pgmux"),
		directUser:     str("DIRECT_PGUSER", "postgres"),
		directPassword: str("DIRECT_PGPASSWORD", ""),
		clients:        num("MATRIX_CLIENTS", 50),
		txns:           num("MATRIX_TXNS", 100),
		poolMax:        num("MATRIX_POOL_MAX", 2),
		timeout:        time.Duration(num("MATRIX_TIMEOUT_S", 60)) * time.Second,
	}
	e.directPort = num("DIRECT_PGPORT", e.port)
	return e, errors.Join(errs...)
}

// direct says whether the suite talks to PostgreSQL itself, where the pool-size check means nothing.
func (e *env) direct() bool { return e.port == e.directPort }

func (e *env) url(user, password string, port int, params url.Values) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     net.JoinHostPort(e.host, strconv.Itoa(port)),
		Path:     "/" + e.database,
		RawQuery: params.Encode(),
	}
	return u.String()
}

// run is one scenario of one driver: its deadline and everything it opened.
type run struct {
	ctx    context.Context
	env    *env
	drv    *driver
	oracle *oracle

	mu    sync.Mutex
	conns []*pgx.Conn
	pools []*pgxpool.Pool
	raw   []*pgconn.PgConn // every connection, pooled or not, for abortAll
}

// app is the application_name this driver announces.
func (r *run) app() string { return "matrix-" + r.drv.name }

// table names a scratch table after the driver, as the contract asks (`pgx_exec_s6`).
func (r *run) table(suffix string) string {
	return strings.NewReplacer("-", "_").Replace(r.drv.name) + "_" + suffix
}

// config parses a connection configuration for pgmux in this driver's mode.
func (r *run) config(app string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(r.env.url(r.env.user, r.env.password, r.env.port,
		url.Values{"application_name": {app}}))
	if err != nil {
		panic(err) // built from validated parts: a parse error is a bug in this file
	}
	cfg.DefaultQueryExecMode = r.drv.mode
	cfg.ConnectTimeout = 10 * time.Second
	return cfg
}

// connect opens a connection with the driver's configuration; the runner closes it if the body does not.
func (r *run) connect() (*pgx.Conn, error) { return r.connectWith(r.config(r.app())) }

func (r *run) connectWith(cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(r.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	r.mu.Lock()
	r.conns = append(r.conns, conn)
	r.raw = append(r.raw, conn.PgConn())
	r.mu.Unlock()
	return conn, nil
}

// pool opens a pgxpool of at most max connections in the driver's mode.
func (r *run) pool(max int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig = r.config(r.app())
	cfg.MaxConns = int32(max)
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		r.mu.Lock()
		r.raw = append(r.raw, c.PgConn())
		r.mu.Unlock()
		return nil
	}
	p, err := pgxpool.NewWithConfig(r.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	r.mu.Lock()
	r.pools = append(r.pools, p)
	r.mu.Unlock()
	return p, nil
}

// closeAll closes what the body left open, politely (Terminate), after the body has returned.
func (r *run) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range r.conns {
		_ = c.Close(ctx)
	}
	for _, p := range r.pools {
		p.Close()
	}
	r.conns, r.pools, r.raw = nil, nil, nil
}

// abortAll cuts every socket the body opened while the body may still be using them.
func (r *run) abortAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pc := range r.raw {
		_ = pc.Conn().Close()
	}
}

// sqlstate returns the SQLSTATE of the server error inside err, or "".
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// describe renders an error for a FAIL line: the server's message with its SQLSTATE, as
// `ERROR: prepared statement "x" already exists (42P05)`, behind whatever context wraps it.
func describe(err error) string {
	msg := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		plain := fmt.Sprintf("%s: %s (%s)", pgErr.Severity, pgErr.Message, pgErr.Code)
		if full := pgErr.Error(); strings.Contains(msg, full) {
			msg = strings.Replace(msg, full, plain, 1)
		} else {
			msg += " [" + plain + "]"
		}
	}
	// Some pgx wrappers print the server error themselves, as "(SQLSTATE 42P05)".
	return sqlstateSuffix.ReplaceAllString(msg, "($1)")
}

var sqlstateSuffix = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// expectState checks that err is a server error with the given SQLSTATE.
func expectState(err error, state, what string) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s: succeeded, expected SQLSTATE %s", what, state)
	case sqlstate(err) != state:
		return fmt.Errorf("%s: expected SQLSTATE %s, got: %w", what, state, err)
	}
	return nil
}

// firstError keeps the earliest error of many goroutines, and how many there were.
type firstError struct {
	mu    sync.Mutex
	err   error
	count int
}

func (f *firstError) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	f.count++
}

func (f *firstError) get() (error, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err, f.count
}

// latencies collects durations from many goroutines and reports a percentile.
type latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *latencies) percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}
