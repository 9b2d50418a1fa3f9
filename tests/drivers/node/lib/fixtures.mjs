// Values and SQL shared by the Node drivers, so that every driver is held to the same expectations.

import { createHash } from 'node:crypto'
import { CheckFailed } from './harness.mjs'

// S3: ten types, one parameter each, cast on the server so every driver's default path can send them.
export const S3_SQL =
  'SELECT $1::int4 AS i4, $2::int8 AS i8, $3::numeric AS num, $4::text AS txt, $5::bytea AS by, ' +
  '$6::bool AS bo, $7::timestamptz AS ts, $8::uuid AS u, $9::jsonb AS j, $10::int[] AS arr'

export const S3_COLUMNS = ['i4', 'i8', 'num', 'txt', 'by', 'bo', 'ts', 'u', 'j', 'arr']

// int8 and numeric come back as strings from both drivers, so they go in as strings too.
export const S3_VALUES = [
  [
    42,
    '9007199254740993',
    '12345678901234567890.123456789',
    "héllo wörld ✓ 'quoted' \\ back",
    Buffer.from([0, 1, 2, 0x7f, 0x80, 0xff, 0]),
    true,
    new Date('2026-03-04T05:06:07.891Z'),
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    { a: [1, 'x', null], b: { c: true }, 'ünï': 1.5 },
    [1, 2, 3],
  ],
  [
    -2147483648,
    '-9223372036854775808',
    '0.000001',
    '',
    Buffer.alloc(0),
    false,
    new Date('1970-01-01T00:00:00.000Z'),
    '00000000-0000-0000-0000-000000000000',
    { e: [], n: -0.5, s: '' },
    [null, 5, -7],
  ],
  [null, null, null, null, null, null, null, null, null, null],
]

/** A JSON-comparable form: Buffers as hex, Dates as ISO strings, object keys sorted. */
export function canon(value) {
  if (value === null || value === undefined) return null
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return `\\x${Buffer.from(value).toString('hex')}`
  if (value instanceof Date) return value.toISOString()
  if (typeof value === 'bigint') return value.toString()
  if (Array.isArray(value)) return value.map(canon)
  if (typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canon(value[k])]),
    )
  }
  return value
}

/** Compares a returned S3 row with the values sent, column by column. */
export function checkS3Row(row, values, what) {
  S3_COLUMNS.forEach((col, i) => {
    const got = JSON.stringify(canon(row[col]))
    const want = JSON.stringify(canon(values[i]))
    if (got !== want) throw new CheckFailed(`${what} column ${col}: got ${got}, want ${want}`)
  })
}

/** The fixture row `t` holds for `id` (setup.sql), in the form `canon` produces. */
export function expectedTRow(id) {
  const md5 = createHash('md5').update(String(id)).digest('hex')
  return {
    v: `value ${id}`,
    b: `\\x${md5}`,
    u: `${md5.slice(0, 8)}-${md5.slice(8, 12)}-${md5.slice(12, 16)}-${md5.slice(16, 20)}-${md5.slice(20)}`,
    j: { n: id },
    a: [id, id + 1],
    ts: new Date(Date.UTC(2026, 0, 1) + id * 60000).toISOString(),
  }
}

export function checkTRow(row, id, what) {
  const want = expectedTRow(id)
  for (const [col, value] of Object.entries(want)) {
    const got = JSON.stringify(canon(row[col]))
    if (got !== JSON.stringify(value)) {
      throw new CheckFailed(`${what} t.${col} for id ${id}: got ${got}, want ${JSON.stringify(value)}`)
    }
  }
}

// S4: five SQL texts shared by every client, plus one per client (`ownSql(k)`).
export const S4 = {
  lock: 'SELECT f FROM t WHERE id = $1 FOR UPDATE',
  bump: 'UPDATE t SET f = f + 1 WHERE id = $1 RETURNING f',
  read: 'SELECT v FROM t WHERE id = $1',
  audit: 'INSERT INTO audit (client, pid, n) VALUES ($1, pg_backend_pid(), $2)',
  count: 'SELECT count(*)::int AS c FROM audit WHERE client = $1',
}

export const ownSql = (k) => `SELECT $1::int + ${k} AS own`

/** Row of `t` that client `k` touches in its transaction `n`. */
export const s4Id = (k, n, txns) => ((k * txns + n) % 1000) + 1

// S7: the whole of `big`.
export const BIG_ROWS = 1000000
export const BIG_ID_SUM = (BIG_ROWS * (BIG_ROWS + 1)) / 2

// S10: a session search_path for the leak probe. It keeps `public`, so that a pooler that leaks it to
// other clients fails S10 but does not break every later scenario with "relation t does not exist".
export const LEAK_PATH = 'matrix_alt, public'
