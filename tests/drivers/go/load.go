// S4 (prepared churn under load), S7 (a million rows through a cursor while others work) and S8 (cancel
// while others work), with the background workers the last two share.
package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The five SQL texts every S4 client shares; each client adds one of its own.
const (
	sqlSelectV   = "SELECT v FROM t WHERE id = $1"
	sqlUpdateF   = "UPDATE t SET f = f + 1 WHERE id = $1"
	sqlAudit     = "INSERT INTO audit(client, pid, n) VALUES ($1, pg_backend_pid(), $2)"
	sqlCountNear = "SELECT count(*) FROM t WHERE id BETWEEN $1 AND $1 + 9"
	sqlDouble    = "SELECT $1::int8 * 2"
)

// s4PreparedChurn: MATRIX_CLIENTS clients × MATRIX_TXNS transactions through pgxpool; every audit row must
// land, on at least two backends, and pgmux must never open more than MATRIX_POOL_MAX of them.
func s4PreparedChurn(r *run) (string, error) {
	e := r.env
	prefix := r.drv.name + ":"
	if err := r.oracle.exec(r.ctx, "DELETE FROM audit WHERE left(client, length($1)) = $1", prefix); err != nil {
		return "", err
	}
	pool, err := r.pool(e.clients)
	if err != nil {
		return "", err
	}
	defer pool.Close()

	sample := r.oracle.sampleBackends(r.ctx)
	var fails firstError
	var wg sync.WaitGroup
	start := time.Now()
	for c := range e.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("%s%02d", prefix, c)
			for n := range e.txns {
				if err := churnOnce(r.ctx, pool, client, c, n, e.txns); err != nil {
					fails.add(fmt.Errorf("client %d txn %d: %w", c, n, err))
					return // one failure per client is enough to know; it keeps a broken run short
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	maxSeen, samples, sampleErr := sample.finish()
	if err, count := fails.get(); err != nil {
		return "", fmt.Errorf("%d of %d clients failed; first: %w", count, e.clients, err)
	}
	if sampleErr != nil {
		return "", sampleErr
	}

	var rows, distinct, pids int
	if err := r.oracle.queryRow(r.ctx, `SELECT count(*), count(DISTINCT (client, n)), count(DISTINCT pid)
		FROM audit WHERE left(client, length($1)) = $1`, []any{prefix}, &rows, &distinct, &pids); err != nil {
		return "", err
	}
	want := e.clients * e.txns
	if rows != want || distinct != want {
		return "", fmt.Errorf("audit holds %d rows (%d distinct), want %d", rows, distinct, want)
	}
	if pids < 2 {
		return "", fmt.Errorf("all %d audit rows came from %d backend pid(s), want ≥ 2", rows, pids)
	}
	bound, err := r.oracle.poolCheck(maxSeen, samples)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d txns in %.1fs, 0 errors, %d distinct pids, %s", want, elapsed.Seconds(), pids, bound), nil
}

// churnOnce is one S4 transaction plus one autocommit query.
func churnOnce(ctx context.Context, pool *pgxpool.Pool, client string, c, n, txns int) error {
	id := (c*txns+n)%1000 + 1
	own := fmt.Sprintf("SELECT $1::int + %d AS n", c) // the client's own SQL text
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var v string
		if err := tx.QueryRow(ctx, sqlSelectV, id).Scan(&v); err != nil {
			return err
		}
		if want := fmt.Sprintf("value %d", id); v != want {
			return fmt.Errorf("row %d: v = %q, want %q", id, v, want)
		}
		if tag, err := tx.Exec(ctx, sqlUpdateF, id); err != nil {
			return err
		} else if tag.RowsAffected() != 1 {
			return fmt.Errorf("UPDATE touched %d rows", tag.RowsAffected())
		}
		if _, err := tx.Exec(ctx, sqlAudit, client, n); err != nil {
			return err
		}
		var got int
		if err := tx.QueryRow(ctx, own, n).Scan(&got); err != nil {
			return err
		}
		if got != n+c {
			return fmt.Errorf("own statement returned %d, want %d", got, n+c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n%2 == 0 {
		var count int
		if err := pool.QueryRow(ctx, sqlCountNear, id%990+1).Scan(&count); err != nil {
			return fmt.Errorf("autocommit: %w", err)
		}
		if count != 10 {
			return fmt.Errorf("autocommit count = %d, want 10", count)
		}
		return nil
	}
	var doubled int64
	if err := pool.QueryRow(ctx, sqlDouble, n).Scan(&doubled); err != nil {
		return fmt.Errorf("autocommit: %w", err)
	}
	if doubled != int64(2*n) {
		return fmt.Errorf("autocommit doubled %d to %d", n, doubled)
	}
	return nil
}

// workers run short S4-style transactions in the background until stopped.
type workers struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	counts []atomic.Int64
	fails  firstError
	saw    atomic.Bool // a worker got 57014: a cancel meant for someone else reached it
	lat    latencies
}

func (r *run) startWorkers(n int) (*workers, error) {
	pool, err := r.pool(n)
	if err != nil {
		return nil, err
	}
	w := &workers{stop: make(chan struct{}), counts: make([]atomic.Int64, n)}
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-w.stop:
					return
				case <-r.ctx.Done():
					return
				default:
				}
				id := (i*7919+k)%1000 + 1
				start := time.Now()
				err := pgx.BeginFunc(r.ctx, pool, func(tx pgx.Tx) error {
					var v string
					if err := tx.QueryRow(r.ctx, sqlSelectV, id).Scan(&v); err != nil {
						return err
					}
					_, err := tx.Exec(r.ctx, sqlUpdateF, id)
					return err
				})
				if err != nil {
					if r.ctx.Err() != nil {
						return
					}
					if sqlstate(err) == "57014" {
						w.saw.Store(true)
					}
					w.fails.add(fmt.Errorf("worker %d: %w", i, err))
					return
				}
				w.lat.add(time.Since(start))
				w.counts[i].Add(1)
				time.Sleep(time.Millisecond) // leave the two cores some air
			}
		}()
	}
	return w, nil
}

// awaitFirstCommit waits until every worker has committed once, so that a worker still logging in does
// not count as one that stalled.
func (w *workers) awaitFirstCommit(ctx context.Context) error {
	for {
		if err, _ := w.fails.get(); err != nil {
			return nil // finish reports it
		}
		ready := true
		for i := range w.counts {
			ready = ready && w.counts[i].Load() > 0
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("background workers did not commit before the deadline")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (w *workers) snapshot() []int64 {
	out := make([]int64, len(w.counts))
	for i := range w.counts {
		out[i] = w.counts[i].Load()
	}
	return out
}

// finish stops the workers and returns the first error any of them saw.
func (w *workers) finish() error {
	close(w.stop)
	w.wg.Wait()
	err, count := w.fails.get()
	if err == nil {
		return nil
	}
	if w.saw.Load() {
		return fmt.Errorf("a bystander got SQLSTATE 57014 (%d worker(s) failed): %w", count, err)
	}
	return fmt.Errorf("%d background worker(s) failed: %w", count, err)
}

// s7Stream: a million rows through a cursor inside a transaction, fetched 10,000 at a time, while four
// other clients keep committing.
func s7Stream(r *run) (string, error) {
	const others = 4
	w, err := r.startWorkers(others)
	if err != nil {
		return "", err
	}
	conn, err := r.connect()
	if err != nil {
		w.finish()
		return "", err
	}
	defer conn.Close(r.ctx)

	if err := w.awaitFirstCommit(r.ctx); err != nil {
		w.finish()
		return "", err
	}
	before := w.snapshot()
	start := time.Now()
	rows, sum, fetches, streamErr := streamBig(r.ctx, conn)
	elapsed := time.Since(start)
	after := w.snapshot()
	if err := w.finish(); err != nil {
		return "", err
	}
	if streamErr != nil {
		return "", streamErr
	}
	if rows != 1_000_000 || sum != 500_000_500_000 {
		return "", fmt.Errorf("cursor gave %d rows summing to %d, want 1000000 and 500000500000", rows, sum)
	}
	var total int64
	for i := range before {
		if after[i] == before[i] {
			return "", fmt.Errorf("background worker %d committed nothing during the %.1fs stream", i, elapsed.Seconds())
		}
		total += after[i] - before[i]
	}
	return fmt.Sprintf("1000000 rows in %d fetches (%.1fs); %d others committed %d txns meanwhile, p99 %s",
		fetches, elapsed.Seconds(), others, total, w.lat.percentile(0.99).Round(time.Millisecond)), nil
}

func streamBig(ctx context.Context, conn *pgx.Conn) (rows, sum int64, fetches int, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DECLARE matrix_s7 NO SCROLL CURSOR FOR SELECT id, v FROM big"); err != nil {
			return err
		}
		for {
			fetches++
			batch, err := tx.Query(ctx, "FETCH 10000 FROM matrix_s7")
			if err != nil {
				return err
			}
			var got int64
			for batch.Next() {
				var id int64
				var v string
				if err := batch.Scan(&id, &v); err != nil {
					batch.Close()
					return err
				}
				if len(v) != 32 {
					batch.Close()
					return fmt.Errorf("row %d: v = %q", id, v)
				}
				got++
				sum += id
			}
			if err := batch.Err(); err != nil {
				return err
			}
			rows += got
			if got == 0 {
				return nil
			}
		}
	})
	return rows, sum, fetches, err
}

// s8Cancel: `SELECT pg_sleep(30)` given up after 200 ms while four others work, twice: through pgx's
// CancelRequest handler (57014 on the same connection, which stays usable) and through its default
// handler (the connection is dropped and pgx sends a CancelRequest, which must stop the query on the
// server). Nobody else may see 57014.
func s8Cancel(r *run) (string, error) {
	const sleepSQL = "SELECT pg_sleep($1)"
	w, err := r.startWorkers(4)
	if err != nil {
		return "", err
	}
	detail, err := cancelBoth(r, sleepSQL)
	if werr := w.finish(); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return "", err
	}
	return detail, nil
}

func cancelBoth(r *run, sleepSQL string) (string, error) {
	// 1. CancelRequestContextWatcherHandler: the server answers 57014 and the connection lives on.
	cfg := r.config(r.app())
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 5 * time.Second}
	}
	conn, err := r.connectWith(cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	took, err := sleepWithTimeout(r, conn, sleepSQL)
	if err := expectState(err, "57014", "pg_sleep(30) cancelled by CancelRequest"); err != nil {
		return "", err
	}
	if took > 2*time.Second {
		return "", fmt.Errorf("57014 arrived %s after the cancel, want < 2s", took)
	}
	var one int
	if err := conn.QueryRow(r.ctx, "SELECT $1::int", 1).Scan(&one); err != nil || one != 1 {
		return "", fmt.Errorf("connection after the cancel: %d, %v", one, err)
	}

	// 2. The default handler: pgx closes the socket and sends a CancelRequest on its way out.
	conn2, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn2.Close(r.ctx)
	took2, err := sleepWithTimeout(r, conn2, sleepSQL)
	switch {
	case err == nil:
		return "", fmt.Errorf("default handler: pg_sleep(30) returned without error")
	case !errors.Is(err, context.Canceled) && !pgconn.Timeout(err):
		return "", fmt.Errorf("default handler: expected a timeout, got: %w", err)
	case took2 > 2*time.Second:
		return "", fmt.Errorf("default handler: gave up after %s, want < 2s", took2)
	case !conn2.IsClosed():
		return "", fmt.Errorf("default handler: connection still open after a timeout")
	}
	if err := r.oracle.waitNoActive(r.ctx, sleepSQL, 2*time.Second); err != nil {
		return "", fmt.Errorf("default handler: %w", err)
	}
	conn3, err := r.connect()
	if err != nil {
		return "", fmt.Errorf("reconnect after the timeout: %w", err)
	}
	defer conn3.Close(r.ctx)
	if err := conn3.QueryRow(r.ctx, "SELECT $1::int", 1).Scan(&one); err != nil {
		return "", fmt.Errorf("reconnected connection: %w", err)
	}
	return fmt.Sprintf("57014 after %s on a live connection; default handler gave up after %s and the server "+
		"query stopped; no bystander saw 57014", took.Round(time.Millisecond), took2.Round(time.Millisecond)), nil
}

// sleepWithTimeout runs pg_sleep(30) and cancels its context once it has run for 200 ms and the oracle sees
// it running, so that a loaded machine cannot make the cancel arrive before the query. It returns how long
// after the cancel the driver gave up.
func sleepWithTimeout(r *run, conn *pgx.Conn, sleepSQL string) (time.Duration, error) {
	qctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	fired := make(chan time.Time, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		r.oracle.waitActive(qctx, sleepSQL, 5*time.Second) // cancel anyway if the oracle cannot tell
		fired <- time.Now()
		cancel()
	}()
	var out any
	err := conn.QueryRow(qctx, sleepSQL, 30.0).Scan(&out)
	select {
	case at := <-fired:
		return time.Since(at), err
	default:
		return 0, err // over before the cancel: err says why
	}
}
