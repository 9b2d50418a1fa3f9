// S6: COPY in (pgx CopyFrom, binary), COPY out (pgconn CopyTo), and two COPY INs that fail: a bad row the
// server rejects and a CopyFail the client sends.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
)

const copyRows = 100_000

func s6Copy(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	tbl := r.table("s6")
	if _, err := conn.Exec(r.ctx, fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id int, v text)", tbl)); err != nil {
		return "", err
	}
	defer conn.Exec(r.ctx, "DROP TABLE IF EXISTS "+tbl)

	i := 0
	n, err := conn.CopyFrom(r.ctx, pgx.Identifier{tbl}, []string{"id", "v"}, pgx.CopyFromFunc(func() ([]any, error) {
		if i == copyRows {
			return nil, nil
		}
		i++
		return []any{int32(i), fmt.Sprintf("row %d", i)}, nil
	}))
	if err != nil {
		return "", fmt.Errorf("COPY FROM STDIN: %w", err)
	}
	if n != copyRows {
		return "", fmt.Errorf("COPY FROM STDIN reported %d rows, want %d", n, copyRows)
	}
	if err := countRows(r, conn, tbl, copyRows); err != nil {
		return "", err
	}

	// COPY out: every line must be there, in order.
	pr, pw := io.Pipe()
	lines := make(chan error, 1)
	go func() { lines <- checkCopyLines(pr) }()
	tag, err := conn.PgConn().CopyTo(r.ctx, pw, fmt.Sprintf("COPY (SELECT id, v FROM %s ORDER BY id) TO STDOUT", tbl))
	pw.CloseWithError(err)
	if lerr := <-lines; err == nil && lerr != nil {
		err = lerr
	}
	if err != nil {
		return "", fmt.Errorf("COPY TO STDOUT: %w", err)
	}
	if tag.RowsAffected() != copyRows {
		return "", fmt.Errorf("COPY TO STDOUT reported %d rows", tag.RowsAffected())
	}

	// A row the server rejects.
	_, err = conn.PgConn().CopyFrom(r.ctx, strings.NewReader("1\tfine\nnot-a-number\tbad\n"),
		fmt.Sprintf("COPY %s (id, v) FROM STDIN", tbl))
	if err := expectState(err, "22P02", "COPY IN with a bad row"); err != nil {
		return "", err
	}
	if err := countRows(r, conn, tbl, copyRows); err != nil {
		return "", fmt.Errorf("after the bad row: %w", err)
	}

	// The client gives up half way: pgx sends CopyFail.
	j := 0
	_, err = conn.CopyFrom(r.ctx, pgx.Identifier{tbl}, []string{"id", "v"}, pgx.CopyFromFunc(func() ([]any, error) {
		if j == 500 {
			return nil, errors.New("matrix: source failed on purpose")
		}
		j++
		return []any{int32(j), "doomed"}, nil
	}))
	if err == nil || !strings.Contains(err.Error(), "source failed on purpose") {
		return "", fmt.Errorf("COPY IN ended by CopyFail: expected the source's error, got %v", err)
	}
	if err := countRows(r, conn, tbl, copyRows); err != nil {
		return "", fmt.Errorf("after CopyFail: %w", err)
	}
	return fmt.Sprintf("%d rows in, %d out in order; bad row 22P02 and CopyFail both left the connection usable",
		copyRows, copyRows), nil
}

func countRows(r *run, conn *pgx.Conn, tbl string, want int) error {
	var got int
	if err := conn.QueryRow(r.ctx, "SELECT count(*) FROM "+tbl).Scan(&got); err != nil {
		return fmt.Errorf("count %s: %w", tbl, err)
	}
	if got != want {
		return fmt.Errorf("%s holds %d rows, want %d", tbl, got, want)
	}
	return nil
}

// checkCopyLines reads COPY text output and checks it is rows 1..copyRows in order.
func checkCopyLines(r io.Reader) error {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		if want := fmt.Sprintf("%d\trow %d", n, n); sc.Text() != want {
			io.Copy(io.Discard, r)
			return fmt.Errorf("COPY line %d is %q, want %q", n, sc.Text(), want)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n != copyRows {
		return fmt.Errorf("COPY TO STDOUT gave %d lines, want %d", n, copyRows)
	}
	return nil
}
