// S12 (statements dropped and used again), S13 (statement names shared between clients) and S14 (the
// unnamed statement across Sync units).
package main

import (
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// s12Deallocate: statements cached by pgx, then `deallocate all` (pgx DeallocateAll) and a protocol Close
// (Conn.Deallocate), then the same statements again: pgx must prepare them anew without "does not exist".
// DISCARD ALL is left out: pgx does not watch for it, so it fails straight against PostgreSQL too.
func s12Deallocate(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	queries := []string{"SELECT $1::int * 3", "SELECT $1::int * 5"}
	useAll := func(when string) error {
		for round := range 3 {
			for k, q := range queries {
				var got int
				if err := conn.QueryRow(r.ctx, q, round).Scan(&got); err != nil {
					return fmt.Errorf("%s: %q: %w", when, q, err)
				}
				if want := round * []int{3, 5}[k]; got != want {
					return fmt.Errorf("%s: %q returned %d, want %d", when, q, got, want)
				}
			}
		}
		return nil
	}
	if err := useAll("before DeallocateAll"); err != nil {
		return "", err
	}
	if err := conn.DeallocateAll(r.ctx); err != nil {
		return "", fmt.Errorf("DeallocateAll: %w", err)
	}
	if err := useAll("after DeallocateAll"); err != nil {
		return "", err
	}

	const name = "matrix_s12"
	for pass := range 2 {
		if _, err := conn.Prepare(r.ctx, name, "SELECT $1::text || '!'"); err != nil {
			return "", fmt.Errorf("Prepare %s (pass %d): %w", name, pass+1, err)
		}
		for i := range 2 {
			var got string
			if err := conn.QueryRow(r.ctx, name, "hi").Scan(&got); err != nil || got != "hi!" {
				return "", fmt.Errorf("%s pass %d use %d: %q, %v", name, pass+1, i+1, got, err)
			}
		}
		if err := conn.Deallocate(r.ctx, name); err != nil {
			return "", fmt.Errorf("Close %s (pass %d): %w", name, pass+1, err)
		}
	}
	return "cached statements re-prepared after DeallocateAll; Close then Prepare of the same name twice", nil
}

// s13NameCollisions: (1) two connections prepare the same name with different SQL and result shapes, and
// use them in turn; (2) four connections run the same SQL, which pgx names identically on each
// (stmtcache_<sha256>). Each client must get its own statement's result.
func s13NameCollisions(r *run) (string, error) {
	const name, rounds = "matrix_s13", 20
	sqls := []string{"SELECT 'A:' || $1::text", "SELECT $1::int + 1000, 'B'"}
	var conns []*pgx.Conn
	for range sqls {
		c, err := r.connect()
		if err != nil {
			return "", err
		}
		defer c.Close(r.ctx)
		conns = append(conns, c)
	}
	for i, c := range conns {
		if _, err := c.Prepare(r.ctx, name, sqls[i]); err != nil {
			return "", fmt.Errorf("client %d: Prepare %s: %w", i, name, err)
		}
	}
	for i := range rounds {
		var a string
		if err := conns[0].QueryRow(r.ctx, name, fmt.Sprint(i)).Scan(&a); err != nil || a != fmt.Sprintf("A:%d", i) {
			return "", fmt.Errorf("client A round %d: %q, %v", i, a, err)
		}
		var n int
		var b string
		if err := conns[1].QueryRow(r.ctx, name, i).Scan(&n, &b); err != nil || n != 1000+i || b != "B" {
			return "", fmt.Errorf("client B round %d: %d %q, %v", i, n, b, err)
		}
	}

	// Same SQL, same generated name, unrelated clients running at once.
	var wg sync.WaitGroup
	var fails firstError
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := r.connect()
			if err != nil {
				fails.add(err)
				return
			}
			defer conn.Close(r.ctx)
			for i := range rounds {
				var got int
				if err := conn.QueryRow(r.ctx, "SELECT $1::int * 10 + $2::int", i, c).Scan(&got); err != nil {
					fails.add(fmt.Errorf("shared-SQL client %d round %d: %w", c, i, err))
					return
				}
				if got != i*10+c {
					fails.add(fmt.Errorf("shared-SQL client %d round %d got %d", c, i, got))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := fails.get(); err != nil {
		return "", err
	}
	return fmt.Sprintf("same name, different SQL: %d rounds each right; same SQL on 4 clients: right", rounds), nil
}

// s14UnnamedAcrossSyncs: describe_exec sends Parse/Describe/Sync, then Bind/Execute/Sync, outside any
// transaction. Four clients with different SQL share the pool; each must get its own statement.
func s14UnnamedAcrossSyncs(r *run) (string, error) {
	const clients, rounds = 4, 50
	pool, err := r.pool(clients)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var wg sync.WaitGroup
	var fails firstError
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(r.ctx)
			if err != nil {
				fails.add(err)
				return
			}
			defer conn.Release()
			sql := fmt.Sprintf("SELECT $1::int + %d, %d", c*1000, c)
			for i := range rounds {
				var sum, who int
				if err := conn.QueryRow(r.ctx, sql, i).Scan(&sum, &who); err != nil {
					fails.add(fmt.Errorf("client %d round %d: %w", c, i, err))
					return
				}
				if sum != i+c*1000 || who != c {
					fails.add(fmt.Errorf("client %d round %d ran another client's statement: got (%d, %d)", c, i, sum, who))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, count := fails.get(); err != nil {
		return "", fmt.Errorf("%d of %d clients failed; first: %w", count, clients, err)
	}
	return fmt.Sprintf("%d clients × %d unnamed Parse/Describe/Sync + Bind/Execute/Sync, each got its own", clients, rounds), nil
}
