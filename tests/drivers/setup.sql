-- Fixtures for the driver compatibility matrix (tests/drivers). Applied once per matrix run, as the
-- superuser, to database pgmux, before any suite starts.
DROP TABLE IF EXISTS t, big, audit, copy_target CASCADE;
CREATE TABLE t (
    id int PRIMARY KEY,
    v text,
    f float8,
    ts timestamptz,
    b bytea,
    u uuid,
    j jsonb,
    a int[]
);
INSERT INTO t
SELECT g, 'value ' || g, g / 3.0, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute',
       decode(md5(g::text), 'hex'), md5(g::text)::uuid, jsonb_build_object('n', g), ARRAY[g, g + 1]
FROM generate_series(1, 1000) g;
CREATE TABLE big AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 1000000) g;
CREATE TABLE audit (client text, pid int, n int);
CREATE TABLE copy_target (id int, v text);
CREATE OR REPLACE FUNCTION notice(msg text) RETURNS void LANGUAGE plpgsql AS
$$ BEGIN RAISE NOTICE 'hello %', msg; END $$;
CREATE SCHEMA IF NOT EXISTS matrix_alt;
GRANT ALL ON ALL TABLES IN SCHEMA public TO pgmux_app;
GRANT ALL ON SCHEMA matrix_alt TO pgmux_app;
ANALYZE;
