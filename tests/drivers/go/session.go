// S9 (notices and notifications) and S10 (SET LOCAL, and a session SET that must not leak to others).
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// s9Notices: two clients raise notices at the same time and each must get exactly its own; a NOTIFY sent
// through pgmux must reach a LISTEN on a direct connection.
func s9Notices(r *run) (string, error) {
	const rounds = 20
	var wg sync.WaitGroup
	var fails firstError
	for _, who := range []string{"A", "B"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mu sync.Mutex
			var got []string
			cfg := r.config(r.app())
			cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
				mu.Lock()
				got = append(got, n.Message)
				mu.Unlock()
			}
			conn, err := r.connectWith(cfg)
			if err != nil {
				fails.add(err)
				return
			}
			defer conn.Close(r.ctx)
			for i := range rounds {
				if _, err := conn.Exec(r.ctx, "SELECT notice($1)", fmt.Sprintf("%s-%d", who, i)); err != nil {
					fails.add(fmt.Errorf("client %s: %w", who, err))
					return
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != rounds {
				fails.add(fmt.Errorf("client %s got %d notices, want %d: %v", who, len(got), rounds, got))
				return
			}
			for i, msg := range got {
				if want := fmt.Sprintf("hello %s-%d", who, i); msg != want {
					fails.add(fmt.Errorf("client %s notice %d is %q, want %q", who, i, msg, want))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := fails.get(); err != nil {
		return "", err
	}
	if err := notifyReachesDirectListener(r); err != nil {
		return "", err
	}
	return fmt.Sprintf("2 clients × %d notices, each got its own in order; NOTIFY reached a direct LISTEN", rounds), nil
}

func notifyReachesDirectListener(r *run) error {
	e := r.env
	listener, err := pgx.Connect(r.ctx, e.url(e.directUser, e.directPassword, e.directPort, nil))
	if err != nil {
		return fmt.Errorf("direct LISTEN connection: %w", err)
	}
	defer listener.Close(context.Background())
	channel := r.table("s9")
	if _, err := listener.Exec(r.ctx, "LISTEN "+channel); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	conn, err := r.connect()
	if err != nil {
		return err
	}
	defer conn.Close(r.ctx)
	payloads := []string{fmt.Sprintf("via pg_notify %d", time.Now().UnixNano()), "via NOTIFY"}
	if _, err := conn.Exec(r.ctx, "SELECT pg_notify($1, $2)", channel, payloads[0]); err != nil {
		return fmt.Errorf("pg_notify through the pooler: %w", err)
	}
	if _, err := conn.Exec(r.ctx, fmt.Sprintf("NOTIFY %s, '%s'", channel, payloads[1])); err != nil {
		return fmt.Errorf("NOTIFY through the pooler: %w", err)
	}
	for _, want := range payloads {
		wctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("waiting for %q on the direct listener: %w", want, err)
		}
		if n.Channel != channel || n.Payload != want {
			return fmt.Errorf("direct listener got %q on %s, want %q", n.Payload, n.Channel, want)
		}
	}
	return nil
}

// s10SessionState: SET LOCAL holds for its transaction only; a session SET of search_path stays with the
// client that made it and never shows up at another client.
func s10SessionState(r *run) (detail string, err error) {
	defer func() {
		if serr := scrubSearchPath(r); serr != nil && err == nil {
			err = serr
		}
	}()
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	err = pgx.BeginFunc(r.ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.ctx, "SET LOCAL statement_timeout = '100ms'"); err != nil {
			return err
		}
		_, err := tx.Exec(r.ctx, "SELECT pg_sleep($1)", 1.0)
		return err
	})
	if err := expectState(err, "57014", "pg_sleep(1) under SET LOCAL statement_timeout = '100ms'"); err != nil {
		return "", err
	}
	err = pgx.BeginFunc(r.ctx, conn, func(tx pgx.Tx) error {
		var timeout string
		if err := tx.QueryRow(r.ctx, "SELECT current_setting('statement_timeout')").Scan(&timeout); err != nil {
			return err
		}
		if timeout != "0" {
			return fmt.Errorf("statement_timeout is %q in the next transaction", timeout)
		}
		_, err := tx.Exec(r.ctx, "SELECT pg_sleep($1)", 0.2)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("transaction after SET LOCAL: %w", err)
	}

	// Leak probe: A sets search_path for its session; B must never see it, A must keep it.
	a, err := r.connect()
	if err != nil {
		return "", err
	}
	defer a.Close(r.ctx)
	b, err := r.connect()
	if err != nil {
		return "", err
	}
	defer b.Close(r.ctx)
	var defaultPath string
	if err := b.QueryRow(r.ctx, "SELECT current_setting('search_path')").Scan(&defaultPath); err != nil {
		return "", err
	}
	if _, err := a.Exec(r.ctx, "SET search_path = matrix_alt"); err != nil {
		return "", fmt.Errorf("A: SET search_path: %w", err)
	}
	const rounds = 20
	for i := range rounds {
		for _, c := range []struct {
			name string
			conn *pgx.Conn
			want string
		}{{"A", a, "matrix_alt"}, {"B", b, defaultPath}} {
			var got string
			if err := c.conn.QueryRow(r.ctx, "SELECT current_setting('search_path')").Scan(&got); err != nil {
				return "", fmt.Errorf("%s round %d: %w", c.name, i, err)
			}
			if got != c.want {
				return "", fmt.Errorf("%s round %d: search_path is %q, want %q (session SET of a parameter "+
					"the server does not report)", c.name, i, got, c.want)
			}
		}
	}
	return fmt.Sprintf("SET LOCAL honoured (57014) and gone next txn; %d rounds: A kept matrix_alt, B kept %q",
		rounds, defaultPath), nil
}

// scrubSearchPath undoes the leak probe's session SET wherever a pooler may have left it, so that later
// scenarios and suites find their tables. It holds MATRIX_POOL_MAX transactions open at once, which puts
// each on a different server connection, and resets search_path in each before committing.
func scrubSearchPath(r *run) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := r.env.poolMax
	var wg sync.WaitGroup
	var all sync.WaitGroup // every transaction open before any commits
	all.Add(n)
	var fails firstError
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.ConnectConfig(ctx, r.config(r.app()))
			if err != nil {
				all.Done()
				fails.add(err)
				return
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, "RESET search_path")
			}
			all.Done()
			if err != nil {
				fails.add(fmt.Errorf("scrub %d: %w", i, err))
				return
			}
			all.Wait()
			if err := tx.Commit(ctx); err != nil {
				fails.add(fmt.Errorf("scrub %d: %w", i, err))
			}
		}()
	}
	wg.Wait()
	if err, _ := fails.get(); err != nil {
		return fmt.Errorf("resetting search_path on the pooled servers after the probe: %w", err)
	}
	return nil
}
