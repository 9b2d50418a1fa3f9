// S15: a hundred queries in flight at once, as a pgx Batch (one Sync, prepared in the mode's way first)
// and as a pgconn pipeline with a Sync after each query (a hundred independent autocommit units).
package main

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const pipelined = 100

func s15Pipeline(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)

	// Five SQL texts, so the cached modes prepare several statements in the batch's first unit.
	b := &pgx.Batch{}
	for i := range pipelined {
		b.Queue(fmt.Sprintf("SELECT $1::int + %d", i%5), i)
	}
	br := conn.SendBatch(r.ctx, b)
	for i := range pipelined {
		var got int
		if err := br.QueryRow().Scan(&got); err != nil {
			br.Close()
			return "", fmt.Errorf("batch result %d: %w", i, err)
		}
		if got != i+i%5 {
			br.Close()
			return "", fmt.Errorf("batch result %d is %d, want %d (out of order?)", i, got, i+i%5)
		}
	}
	if err := br.Close(); err != nil {
		return "", fmt.Errorf("batch close: %w", err)
	}

	p := conn.PgConn().StartPipeline(r.ctx)
	for i := range pipelined {
		p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte(strconv.Itoa(i))}, nil, nil, nil)
		p.SendPipelineSync()
	}
	if err := p.Flush(); err != nil {
		p.Close()
		return "", fmt.Errorf("pipeline flush: %w", err)
	}
	for i := range pipelined {
		res, err := p.GetResults()
		if err != nil {
			p.Close()
			return "", fmt.Errorf("pipeline result %d: %w", i, err)
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			p.Close()
			return "", fmt.Errorf("pipeline result %d: got %T", i, res)
		}
		read := rr.Read()
		if read.Err != nil {
			p.Close()
			return "", fmt.Errorf("pipeline result %d: %w", i, read.Err)
		}
		if len(read.Rows) != 1 || string(read.Rows[0][0]) != strconv.Itoa(2*i) {
			p.Close()
			return "", fmt.Errorf("pipeline result %d is %v, want %d (out of order?)", i, read.Rows, 2*i)
		}
		if s, err := p.GetResults(); err != nil {
			p.Close()
			return "", fmt.Errorf("pipeline sync %d: %w", i, err)
		} else if _, ok := s.(*pgconn.PipelineSync); !ok {
			p.Close()
			return "", fmt.Errorf("pipeline sync %d: got %T", i, s)
		}
	}
	if err := p.Close(); err != nil {
		return "", fmt.Errorf("pipeline close: %w", err)
	}
	var one int
	if err := conn.QueryRow(r.ctx, "SELECT $1::int", 1).Scan(&one); err != nil {
		return "", fmt.Errorf("query after the pipeline: %w", err)
	}
	return fmt.Sprintf("batch of %d (5 SQL texts) and pipeline of %d Sync units: all results in order", pipelined, pipelined), nil
}
