// S1 (start-up and ParameterStatus), S2 (simple query), S3 (parameter types) and S11 (binary formats).
package main

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// s1Startup: four clients, each with its own application_name, run 100 transactions on whatever servers
// they get; each must keep seeing its own name, and each driver must have seen server_version ≥ 12.
func s1Startup(r *run) (string, error) {
	const clients, txns = 4, 100
	var version string
	var mu sync.Mutex
	pids := map[uint32]bool{}
	var wg sync.WaitGroup
	var fails firstError
	for c := range clients {
		app := r.app()
		if c > 0 {
			app = fmt.Sprintf("%s-%d", r.app(), c)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := r.connectWith(r.config(app))
			if err != nil {
				fails.add(err)
				return
			}
			defer conn.Close(r.ctx)
			pc := conn.PgConn()
			for key, want := range map[string]string{
				"client_encoding": "UTF8", "standard_conforming_strings": "on", "application_name": app,
			} {
				if got := pc.ParameterStatus(key); got != want {
					fails.add(fmt.Errorf("client %d: ParameterStatus %s = %q, want %q", c, key, got, want))
					return
				}
			}
			sv := pc.ParameterStatus("server_version")
			if major, _ := strconv.Atoi(strings.SplitN(sv, ".", 2)[0]); major < 12 {
				fails.add(fmt.Errorf("client %d: ParameterStatus server_version = %q, want ≥ 12", c, sv))
				return
			}
			mu.Lock()
			version = sv
			mu.Unlock()
			for n := range txns {
				err := pgx.BeginFunc(r.ctx, conn, func(tx pgx.Tx) error {
					var got string
					var pid uint32
					if err := tx.QueryRow(r.ctx, "SELECT current_setting('application_name'), pg_backend_pid()::int8").
						Scan(&got, &pid); err != nil {
						return err
					}
					if got != app {
						return fmt.Errorf("application_name is %q", got)
					}
					mu.Lock()
					pids[pid] = true
					mu.Unlock()
					return nil
				})
				if err != nil {
					fails.add(fmt.Errorf("client %d txn %d: %w", c, n, err))
					return
				}
			}
			var shown string
			if err := conn.QueryRow(r.ctx, "SHOW application_name").Scan(&shown); err != nil || shown != app {
				fails.add(fmt.Errorf("client %d: SHOW application_name = %q after %d txns (%v)", c, shown, txns, err))
			}
		}()
	}
	wg.Wait()
	if err, _ := fails.get(); err != nil {
		return "", err
	}
	return fmt.Sprintf("server_version %s; %d clients × %d txns on %d backend(s) kept their application_name",
		version, clients, txns, len(pids)), nil
}

// s2SimpleQuery: a multi-statement simple query returns both results; an empty query is answered.
func s2SimpleQuery(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)
	results, err := conn.PgConn().Exec(r.ctx, "SELECT 1; SELECT 2").ReadAll()
	if err != nil {
		return "", fmt.Errorf("SELECT 1; SELECT 2: %w", err)
	}
	if len(results) != 2 || len(results[0].Rows) != 1 || len(results[1].Rows) != 1 ||
		string(results[0].Rows[0][0]) != "1" || string(results[1].Rows[0][0]) != "2" {
		return "", fmt.Errorf("SELECT 1; SELECT 2: unexpected results %v", resultRows(results))
	}
	empty, err := conn.PgConn().Exec(r.ctx, "").ReadAll()
	if err != nil {
		return "", fmt.Errorf("empty query: %w", err)
	}
	if len(empty) != 1 || len(empty[0].Rows) != 0 || empty[0].CommandTag.String() != "" {
		return "", fmt.Errorf("empty query: unexpected results %v", resultRows(empty))
	}
	var three int
	if err := conn.QueryRow(r.ctx, "SELECT 3").Scan(&three); err != nil || three != 3 {
		return "", fmt.Errorf("query after the empty query: %d, %v", three, err)
	}
	return "2 results in order; EmptyQueryResponse passed through", nil
}

func resultRows(results []*pgconn.Result) [][]string {
	var out [][]string
	for _, res := range results {
		var row []string
		for _, r := range res.Rows {
			for _, v := range r {
				row = append(row, string(v))
			}
		}
		out = append(out, append(row, "tag="+res.CommandTag.String()))
	}
	return out
}

// s3Types: ten types round-trip through parameters on the mode's default path, and a fixture row reads back
// as setup.sql wrote it.
func s3Types(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)

	var num pgtype.Numeric
	if err := num.Scan("12345678901234567890.123456789"); err != nil {
		return "", err
	}
	blob := make([]byte, 256)
	for i := range blob {
		blob[i] = byte(i)
	}
	ts := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	uuid := pgtype.UUID{Bytes: [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Valid: true}
	doc := map[string]any{"k": []any{1.0, 2.5, "x"}, "nested": map[string]any{"ok": true}}
	// JSON goes as its text: the exec mode sends every parameter as text of an unknown type, and pgx
	// cannot encode a Go map that way; the cached modes accept the text too.
	in := []any{int32(math.MaxInt32), int64(math.MinInt64), num, "héllo wörld ☃ 'q' \\ \"", blob, true, ts, uuid,
		`{"k": [1, 2.5, "x"], "nested": {"ok": true}}`, []int32{1, -2, 3}}

	var (
		i4   int32
		i8   int64
		n    pgtype.Numeric
		txt  string
		b    []byte
		bl   bool
		t    time.Time
		u    pgtype.UUID
		j    map[string]any
		arr  []int32
		sqlq = "SELECT $1::int4, $2::int8, $3::numeric, $4::text, $5::bytea, $6::bool, $7::timestamptz, " +
			"$8::uuid, $9::jsonb, $10::int4[]"
	)
	if err := conn.QueryRow(r.ctx, sqlq, in...).Scan(&i4, &i8, &n, &txt, &b, &bl, &t, &u, &j, &arr); err != nil {
		return "", fmt.Errorf("10-type round trip: %w", err)
	}
	nIn, _ := num.Value()
	nOut, _ := n.Value()
	checks := []struct {
		name string
		ok   bool
		got  any
	}{
		{"int4", i4 == in[0], i4}, {"int8", i8 == in[1], i8}, {"numeric", nIn == nOut, nOut},
		{"text", txt == in[3], txt}, {"bytea", bytes.Equal(b, blob), b}, {"bool", bl, bl},
		{"timestamptz", t.Equal(ts), t}, {"uuid", u == uuid, u}, {"jsonb", reflect.DeepEqual(j, doc), j},
		{"int[]", reflect.DeepEqual(arr, in[9]), arr},
	}
	for _, c := range checks {
		if !c.ok {
			return "", fmt.Errorf("%s came back as %v", c.name, c.got)
		}
	}

	// A fixture row, found by a parameter, holds what setup.sql computed.
	const id = 42
	sum := md5.Sum([]byte(strconv.Itoa(id)))
	var v string
	var rb []byte
	var ru pgtype.UUID
	var rj map[string]any
	var ra []int32
	if err := conn.QueryRow(r.ctx, "SELECT v, b, u, j, a FROM t WHERE id = $1", id).Scan(&v, &rb, &ru, &rj, &ra); err != nil {
		return "", fmt.Errorf("fixture row: %w", err)
	}
	if v != "value 42" || !bytes.Equal(rb, sum[:]) || ru.Bytes != sum || rj["n"] != 42.0 ||
		!reflect.DeepEqual(ra, []int32{id, id + 1}) {
		return "", fmt.Errorf("fixture row %d differs: %q %x %x %v %v", id, v, rb, ru.Bytes, rj, ra)
	}
	return "10 types round-trip equal; fixture row matches", nil
}

// s11Binary: binary parameters and results, NULLs and arrays, once through pgx's typed API with binary
// result formats requested, once as raw bytes that must come back identical.
func s11Binary(r *run) (string, error) {
	conn, err := r.connect()
	if err != nil {
		return "", err
	}
	defer conn.Close(r.ctx)

	one, three := int32(1), int32(3)
	uni, empty := "ünï ☃", ""
	floats := []float64{math.Copysign(0, -1), math.NaN(), math.Inf(1), math.SmallestNonzeroFloat64, math.Pi}
	ints := []*int32{&one, nil, &three}
	texts := []*string{&uni, nil, &empty}
	blob := []byte{0, 1, 2, 0xfe, 0xff, 0, '\\', 'x'}
	binary8 := pgx.QueryResultFormats{1, 1, 1, 1, 1, 1}

	var (
		gotInts   []*int32
		gotTexts  []*string
		gotFloats []float64
		gotBlob   []byte
		gotNull   *int64
		gotI8     int64
	)
	err = conn.QueryRow(r.ctx, "SELECT $1::int4[], $2::text[], $3::float8[], $4::bytea, $5::int8, $6::int8", binary8,
		ints, texts, floats, blob, nil, int64(math.MaxInt64)).
		Scan(&gotInts, &gotTexts, &gotFloats, &gotBlob, &gotNull, &gotI8)
	if err != nil {
		return "", fmt.Errorf("typed binary round trip: %w", err)
	}
	if err := sameFloats(floats, gotFloats); err != nil {
		return "", err
	}
	if !reflect.DeepEqual(gotInts, ints) || !reflect.DeepEqual(gotTexts, texts) || !bytes.Equal(gotBlob, blob) ||
		gotNull != nil || gotI8 != math.MaxInt64 {
		return "", fmt.Errorf("typed binary round trip differs: %v %v %x %v %d", gotInts, gotTexts, gotBlob, gotNull, gotI8)
	}

	// Raw: binary parameters with explicit types; the server's binary output must be the same bytes.
	arr := int4ArrayWithNull(7, 9)
	params := [][]byte{be32(-5), be64(math.MinInt64), blob, arr, nil}
	oids := []uint32{pgtype.Int4OID, pgtype.Int8OID, pgtype.ByteaOID, pgtype.Int4ArrayOID, pgtype.TextOID}
	formats := []int16{1, 1, 1, 1, 1}
	res := conn.PgConn().ExecParams(r.ctx, "SELECT $1, $2, $3, $4, $5", params, oids, formats, formats).Read()
	if res.Err != nil {
		return "", fmt.Errorf("raw binary round trip: %w", res.Err)
	}
	if len(res.Rows) != 1 {
		return "", fmt.Errorf("raw binary round trip: %d rows", len(res.Rows))
	}
	for i, want := range params {
		got := res.Rows[0][i]
		if (want == nil) != (got == nil) || !bytes.Equal(got, want) {
			return "", fmt.Errorf("raw binary column %d: sent %x, got %x", i+1, want, got)
		}
	}
	return "typed arrays with NULLs, -0/NaN/Inf floats, bytea, NULL; raw binary bytes identical", nil
}

func sameFloats(want, got []float64) error {
	if len(want) != len(got) {
		return fmt.Errorf("float8[] came back with %d elements", len(got))
	}
	for i := range want {
		if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
			return fmt.Errorf("float8[%d]: sent %v, got %v", i, want[i], got[i])
		}
	}
	return nil
}

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// int4ArrayWithNull encodes {a, NULL, b} in PostgreSQL's binary array format, as array_send writes it.
func int4ArrayWithNull(a, b int32) []byte {
	var out []byte
	for _, v := range []int32{1, 1, int32(pgtype.Int4OID), 3, 1} { // ndim, has nulls, element type, length, lower bound
		out = append(out, be32(v)...)
	}
	out = append(out, be32(4)...)
	out = append(out, be32(a)...)
	out = append(out, be32(-1)...)
	out = append(out, be32(4)...)
	return append(out, be32(b)...)
}
