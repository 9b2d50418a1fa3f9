// S16: the Unix socket. pgx takes a directory as the host, as libpq does, and finds .s.PGSQL.<port> in it;
// four clients run 25 transactions each through MATRIX_SOCKET_DIR, and the server must have seen the
// pooler's TCP connection (directly: a Unix client), on at most MATRIX_POOL_MAX backends.
package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

func s16UnixSocket(r *run) (string, error) {
	const clients, txns = 4, 25
	// A connection string of its own: a TCP host among the fallbacks would hide a missing socket.
	dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s application_name=%s",
		r.env.socketDir, r.env.port, r.env.user, r.env.password, r.env.database, r.app())
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("the socket's connection string: %w", err)
	}
	cfg.DefaultQueryExecMode = r.drv.mode
	cfg.ConnectTimeout = 10 * time.Second
	var mu sync.Mutex
	pids := map[uint32]bool{}
	unixClients := 0
	var wg sync.WaitGroup
	var fails firstError
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := r.connectWith(cfg.Copy())
			if err != nil {
				fails.add(err)
				return
			}
			for n := range txns {
				tx, err := conn.Begin(r.ctx)
				if err != nil {
					fails.add(fmt.Errorf("transaction %d: %w", n, err))
					return
				}
				var pid uint32
				var noAddress bool
				err = tx.QueryRow(r.ctx, "SELECT pg_backend_pid(), inet_client_addr() IS NULL").Scan(&pid, &noAddress)
				if err == nil {
					err = tx.Commit(r.ctx)
				}
				if err != nil {
					_ = tx.Rollback(r.ctx)
					fails.add(fmt.Errorf("transaction %d: %w", n, err))
					return
				}
				mu.Lock()
				pids[pid] = true
				if noAddress {
					unixClients++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err, count := fails.get(); err != nil {
		return "", fmt.Errorf("%d failure(s), the first: %w", count, err)
	}
	total := clients * txns
	client := "the pooler's TCP connection"
	if r.env.direct() {
		client = "a Unix client"
		if unixClients != total {
			return "", fmt.Errorf("%d of %d transactions had a TCP client", total-unixClients, total)
		}
	} else {
		if unixClients != 0 {
			return "", fmt.Errorf("%d of %d transactions ran on a Unix-socket backend", unixClients, total)
		}
		if len(pids) > r.env.poolMax {
			return "", fmt.Errorf("%d backends for MATRIX_POOL_MAX=%d", len(pids), r.env.poolMax)
		}
	}
	return fmt.Sprintf("%d txns through %s/.s.PGSQL.%d, %d backends, each saw %s",
		total, r.env.socketDir, r.env.port, len(pids), client), nil
}
