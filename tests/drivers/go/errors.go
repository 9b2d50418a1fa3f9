// S5: the client recovers from errors (a failed statement in a transaction, a failed named Parse, an error
// in the middle of a batch or pipeline, a cached plan whose result type changed).
package main

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// s5aDivisionByZero: 1/0 inside a transaction, ROLLBACK, then the next transaction works.
func s5aDivisionByZero(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	tx, err := conn.Begin(r.ctx)
	if err != nil {
		return "", err
	}
	var x int
	err = tx.QueryRow(r.ctx, "SELECT 1 / $1::int", 0).Scan(&x)
	if err := expectState(err, "22012", "1/0 in a transaction"); err != nil {
		_ = tx.Rollback(r.ctx)
		return "", err
	}
	if err := tx.Rollback(r.ctx); err != nil {
		return "", fmt.Errorf("ROLLBACK: %w", err)
	}
	if err := selectInTx(r, conn, 7); err != nil {
		return "", fmt.Errorf("transaction after ROLLBACK: %w", err)
	}
	return "22012, ROLLBACK, next transaction works", nil
}

func selectInTx(r *run, conn *pgx.Conn, v int) error {
	return pgx.BeginFunc(r.ctx, conn, func(tx pgx.Tx) error {
		var got int
		if err := tx.QueryRow(r.ctx, "SELECT $1::int", v).Scan(&got); err != nil {
			return err
		}
		if got != v {
			return fmt.Errorf("SELECT %d returned %d", v, got)
		}
		return nil
	})
}

// s5bBadParse: a named statement whose Parse fails, then the same name with good SQL, used outside a
// transaction as an application would.
func s5bBadParse(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	const name = "matrix_s5b"
	_, err = conn.Prepare(r.ctx, name, "SELEC $1::int + 1")
	if err := expectState(err, "42601", "Parse of bad SQL"); err != nil {
		return "", err
	}
	if _, err := conn.Prepare(r.ctx, name, "SELECT $1::int + 1"); err != nil {
		return "", fmt.Errorf("Parse of good SQL under the same name: %w", err)
	}
	for i := range 3 {
		var got int
		if err := conn.QueryRow(r.ctx, name, 41+i).Scan(&got); err != nil {
			return "", fmt.Errorf("execution %d of %s: %w", i+1, name, err)
		}
		if got != 42+i {
			return "", fmt.Errorf("%s returned %d, want %d", name, got, 42+i)
		}
	}
	if err := conn.Deallocate(r.ctx, name); err != nil {
		return "", fmt.Errorf("Close %s: %w", name, err)
	}
	return "42601 on the bad Parse; same name re-parsed and executed 3 times", nil
}

// s5cBatchError: an error in the middle of a pgx batch (one Sync: the rest is skipped) and of a pgconn
// pipeline with a Sync per query (the rest runs); the connection works after both.
func s5cBatchError(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)

	b := &pgx.Batch{}
	b.Queue("SELECT $1::int", 1)
	b.Queue("SELECT 1 / $1::int", 0)
	b.Queue("SELECT $1::int", 3)
	br := conn.SendBatch(r.ctx, b)
	var got int
	if err := br.QueryRow().Scan(&got); err != nil || got != 1 {
		br.Close()
		return "", fmt.Errorf("batch query 1: %d, %v", got, err)
	}
	if err := expectState(br.QueryRow().Scan(&got), "22012", "batch query 2"); err != nil {
		br.Close()
		return "", err
	}
	if err := br.QueryRow().Scan(&got); err == nil {
		br.Close()
		return "", fmt.Errorf("batch query 3 ran after an error in the same Sync unit")
	}
	_ = br.Close() // repeats the batch's error
	if err := selectInTx(r, conn, 4); err != nil {
		return "", fmt.Errorf("after the batch: %w", err)
	}

	// A Sync after each query: the failure is confined to its own unit.
	p := conn.PgConn().StartPipeline(r.ctx)
	for _, q := range []string{"SELECT 1", "SELECT 1/0", "SELECT 3"} {
		p.SendQueryParams(q, nil, nil, nil, nil)
		p.SendPipelineSync()
	}
	if err := p.Flush(); err != nil {
		p.Close()
		return "", err
	}
	var outcome []string
	for range 3 {
		// pgconn reports a server error either from GetResults or from the result reader.
		res, err := p.GetResults()
		switch rr, ok := res.(*pgconn.ResultReader); {
		case err != nil && sqlstate(err) != "":
			outcome = append(outcome, sqlstate(err))
		case err != nil:
			p.Close()
			return "", fmt.Errorf("pipeline: %w", err)
		case !ok:
			p.Close()
			return "", fmt.Errorf("pipeline: expected a result, got %T", res)
		default:
			read := rr.Read()
			if read.Err != nil {
				outcome = append(outcome, sqlstate(read.Err))
			} else if len(read.Rows) == 1 {
				outcome = append(outcome, string(read.Rows[0][0]))
			}
		}
		if _, err := p.GetResults(); err != nil { // the unit's Sync
			p.Close()
			return "", fmt.Errorf("pipeline sync: %w", err)
		}
	}
	if err := p.Close(); err != nil {
		return "", fmt.Errorf("pipeline close: %w", err)
	}
	if fmt.Sprint(outcome) != "[1 22012 3]" {
		return "", fmt.Errorf("pipeline with a Sync per query gave %v, want [1 22012 3]", outcome)
	}
	if err := selectInTx(r, conn, 5); err != nil {
		return "", fmt.Errorf("after the pipeline: %w", err)
	}
	return "batch: 22012 then the rest skipped; pipeline: 1, 22012, 3; connection works after both", nil
}

// s5dCachedPlan: a statement cached by the driver, then ALTER TABLE changes its result type; the driver may
// see `cached plan must not change result type` (0A000) once and must recover on the next try.
func s5dCachedPlan(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	tbl := r.table("s5d")
	if _, err := conn.Exec(r.ctx, fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id int, v text); "+
		"INSERT INTO %[1]s VALUES (1, 'one')", tbl)); err != nil {
		return "", err
	}
	defer conn.Exec(r.ctx, "DROP TABLE IF EXISTS "+tbl)

	q := fmt.Sprintf("SELECT * FROM %s WHERE id = $1", tbl)
	columns := func() (int, error) {
		rows, err := conn.Query(r.ctx, q, 1)
		if err != nil {
			return 0, err
		}
		values, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) ([]any, error) { return row.Values() })
		return len(values), err
	}
	for range 3 {
		if n, err := columns(); err != nil || n != 2 {
			return "", fmt.Errorf("before ALTER: %d columns, %v", n, err)
		}
	}
	if _, err := conn.Exec(r.ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN w int DEFAULT 7", tbl)); err != nil {
		return "", err
	}
	seen := "no error"
	n, err := columns()
	if err != nil {
		if sqlstate(err) != "0A000" {
			return "", fmt.Errorf("first query after ALTER: %w", err)
		}
		seen = "0A000 once"
		n, err = columns()
	}
	if err != nil || n != 3 {
		return "", fmt.Errorf("after ALTER (%s): %d columns, %v", seen, n, err)
	}
	if err := selectInTx(r, conn, 6); err != nil {
		return "", fmt.Errorf("transaction after recovery: %w", err)
	}
	return fmt.Sprintf("after ALTER TABLE: %s, then 3 columns; next transaction works", seen), nil
}
