// postgres.js scenarios at the driver's defaults: `prepare: true` makes every tagged query a named
// statement (`<random prefix><n>`, a new prefix per connection), parameterised first runs are
// Parse/Describe/Flush then Bind/Execute/Sync, and concurrent queries on one connection are pipelined.

import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import postgres from 'postgres'
import {
  backgroundWork,
  cfg,
  check,
  checkBackground,
  direct,
  eq,
  expectError,
  judgeSocket,
  randomTag,
  S16,
  sampleBackends,
  sleep,
  table,
  within,
} from './harness.mjs'
import {
  BIG_ID_SUM,
  BIG_ROWS,
  S3_VALUES,
  S4,
  canon,
  checkS3Row,
  checkTRow,
  LEAK_PATH,
  ownSql,
  s4Id,
} from './fixtures.mjs'

// postgres.js decodes a NULL array element as NaN whatever the server sends (its own parser, seen
// directly against PostgreSQL too), so its S3 arrays carry no NULL element.
const S3_VALUES_PJS = S3_VALUES.map((set) => set.map((v) => (Array.isArray(v) && v.includes(null) ? [0, 5, -7] : v)))

// After a rejected COPY the writable may never finish; queries are refused (COPY_IN_PROGRESS) until the
// driver has seen the server's ReadyForQuery, so ask again for up to 5 s.
async function countAfterCopy(sql, tbl) {
  const deadline = Date.now() + 5000
  for (;;) {
    try {
      return (await sql`SELECT count(*)::int AS n FROM ${sql(tbl)}`)[0].n
    } catch (err) {
      if (err.code !== 'COPY_IN_PROGRESS' || Date.now() > deadline) throw err
      await sleep(50)
    }
  }
}

// S1: a startup search_path (a postgres.js `connection` extra) no other scenario uses.
const STARTUP_PATH = 'public, matrix_alt'

export function postgresJs(driver) {
  function open(scope, options = {}) {
    const { connection, ...rest } = options
    const sql = postgres({
      host: cfg.host,
      port: cfg.port,
      user: cfg.user,
      pass: cfg.password,
      database: cfg.database,
      max: 1,
      connect_timeout: 10,
      onnotice: () => {},
      connection: { application_name: `matrix-${driver}`, ...connection },
      ...rest,
    })
    return scope.own(sql, () => sql.end({ timeout: 1 }))
  }

  async function backgroundTxn(sql, tag, k, n) {
    await sql.begin(async (tx) => {
      const [row] = await tx`SELECT v FROM t WHERE id = ${(n % 1000) + 1}`
      eq(row.v, `value ${(n % 1000) + 1}`, 'background read')
      await tx`INSERT INTO audit (client, pid, n) VALUES (${`${driver}-${tag}:${k}`}, pg_backend_pid(), ${n})`
    })
  }

  function startBackground(scope, tag, workers = 4) {
    const conns = Array.from({ length: workers }, () => open(scope))
    return backgroundWork(workers, (k, n) => backgroundTxn(conns[k], tag, k, n))
  }

  const s = {}

  s.S1 = async (scope) => {
    const sql = open(scope, { connection: { search_path: STARTUP_PATH } })
    const noise = Array.from({ length: 4 }, (_, i) => open(scope, { connection: { application_name: `matrix-noise-${i}` } }))
    await sql`SELECT 1`
    const version = sql.parameters.server_version
    check(Number.parseInt(version, 10) >= 12, `server_version ${version} < 12`)
    const bg = backgroundWork(noise.length, (k) =>
      noise[k].begin(async (tx) => {
        eq((await tx`SHOW application_name`)[0].application_name, `matrix-noise-${k}`, 'noise application_name')
        check((await tx`SHOW search_path`)[0].search_path !== STARTUP_PATH, 'noise client sees the startup search_path of another')
      }),
    )
    try {
      for (let n = 0; n < 100; n++) {
        await sql.begin(async (tx) => {
          eq((await tx`SHOW application_name`)[0].application_name, `matrix-${driver}`, `txn ${n} application_name`)
          eq((await tx`SHOW search_path`)[0].search_path, STARTUP_PATH, `txn ${n} search_path`)
        })
      }
      eq((await sql`SHOW application_name`)[0].application_name, `matrix-${driver}`, 'application_name after 100 txns')
    } finally {
      await bg.stop()
    }
    checkBackground(bg, 'noise')
    return `server_version ${version}; application_name and search_path (startup) kept over 100 txns beside 4 other clients (${bg.txns} txns)`
  }

  s.S2 = async (scope) => {
    const sql = open(scope)
    const results = await sql.unsafe('SELECT 1 AS a; SELECT 2 AS b')
    eq(results.map((r) => [...r]), [[{ a: 1 }], [{ b: 2 }]], 'SELECT 1; SELECT 2')
    const empty = await sql.unsafe('')
    eq([...empty], [], 'empty query')
    eq((await sql`SELECT 3 AS c`)[0].c, 3, 'query after the empty one')
    return 'SELECT 1; SELECT 2 gave two results; empty query answered'
  }

  s.S3 = async (scope) => {
    const sql = open(scope)
    for (const [i, v] of S3_VALUES_PJS.entries()) {
      const j = v[8] === null ? null : sql.json(v[8])
      const [row] = await sql`SELECT ${v[0]}::int4 AS i4, ${v[1]}::int8 AS i8, ${v[2]}::numeric AS num,
        ${v[3]}::text AS txt, ${v[4]}::bytea AS by, ${v[5]}::bool AS bo, ${v[6]}::timestamptz AS ts,
        ${v[7]}::uuid AS u, ${j}::jsonb AS j, ${v[9]}::int[] AS arr`
      checkS3Row(row, v, `value set ${i}`)
    }
    for (const id of [1, 7, 1000]) checkTRow((await sql`SELECT * FROM t WHERE id = ${id}`)[0], id, 'fixture')
    return `${S3_VALUES_PJS.length} value sets of 10 types round-trip (no NULL array element: driver bug); 3 fixture rows match`
  }

  s.S4 = async (scope, oracle) => {
    await oracle.query('DELETE FROM audit WHERE client LIKE $1', [`${driver}:%`])
    const conns = Array.from({ length: cfg.clients }, () => open(scope))
    await Promise.all(conns.map((sql) => sql`SELECT 1`))
    const sampler = sampleBackends(oracle)
    const errors = []
    try {
      await Promise.all(
        conns.map(async (sql, k) => {
          const who = `${driver}:${k}`
          const own = ownSql(k)
          try {
            for (let n = 0; n < cfg.txns && !scope.stopped; n++) {
              const id = s4Id(k, n, cfg.txns)
              await sql.begin(async (tx) => {
                const [{ f }] = await tx.unsafe(S4.lock, [id], { prepare: true })
                eq((await tx.unsafe(S4.bump, [id], { prepare: true }))[0].f, f + 1, 'updated f')
                eq((await tx.unsafe(S4.read, [id], { prepare: true }))[0].v, `value ${id}`, 'read v')
                await tx.unsafe(S4.audit, [who, n], { prepare: true })
                eq((await tx.unsafe(own, [n], { prepare: true }))[0].own, n + k, 'own statement')
              })
              eq((await sql.unsafe(S4.count, [who], { prepare: true }))[0].c, n + 1, 'audit rows so far')
            }
          } catch (err) {
            errors.push(err)
          }
        }),
      )
    } finally {
      await sampler.stop()
    }
    if (errors.length > 0) {
      errors[0].message = `${errors.length}/${cfg.clients} clients failed, first: ${errors[0].message}`
      throw errors[0]
    }
    const [audit] = await oracle.query(
      'SELECT count(*)::int AS n, count(DISTINCT pid)::int AS pids FROM audit WHERE client LIKE $1',
      [`${driver}:%`],
    )
    eq(audit.n, cfg.clients * cfg.txns, 'audit rows')
    check(audit.pids >= 2, `only ${audit.pids} distinct backend pid(s) in audit`)
    let cap = `max ${sampler.max} backends (cap not checked: direct)`
    if (!direct) {
      check(sampler.max <= cfg.poolMax, `${sampler.max} backends of ${cfg.user} seen, pool_max ${cfg.poolMax}`)
      cap = `max ${sampler.max} backends`
    }
    return `${audit.n} txns, ${audit.pids} backend pids, ${cap} (${sampler.samples} samples)`
  }

  s.S5 = async (scope) => {
    const sql = open(scope)
    // (a) an error inside a transaction: begin() rolls back
    await expectError(sql.begin((tx) => tx`SELECT 1 / ${0}::int`), '22012', '(a) 1/0')
    eq((await sql.begin((tx) => tx`SELECT ${1}::int AS x`))[0].x, 1, '(a) next txn')
    // (b) a prepared statement whose Parse fails, then good SQL; the driver picks the names
    await expectError(sql`SELEC ${1}::int`, '42601', '(b) bad Parse')
    for (let r = 0; r < 3; r++) eq((await sql`SELECT ${r}::int AS x`)[0].x, r, `(b) good SQL run ${r}`)
    // (c) an error in the middle of a pipeline: three queries in flight on one connection
    const [p1, p2, p3] = [sql`SELECT ${1}::int AS x`, sql`SELECT 1 / ${0}::int AS x`, sql`SELECT ${1}::int + 2 AS x`]
    await expectError(p2, '22012', '(c) pipelined 1/0')
    eq((await p1)[0].x, 1, '(c) before the error')
    eq((await p3)[0].x, 3, '(c) after the error')
    // (d) a cached plan whose result type changes: the driver re-prepares (RevalidateCachedQuery)
    const tbl = table(driver, 's5d')
    await sql.unsafe(`DROP TABLE IF EXISTS ${tbl}; CREATE TABLE ${tbl} (a int); INSERT INTO ${tbl} VALUES (1)`)
    const select = () => sql.unsafe(`SELECT * FROM ${tbl}`, [], { prepare: true }).then((r) => [...r])
    eq(await select(), [{ a: 1 }], '(d) before ALTER')
    eq(await select(), [{ a: 1 }], '(d) before ALTER, again')
    await sql.unsafe(`ALTER TABLE ${tbl} ADD COLUMN b int DEFAULT 7`)
    let outcome = 'new shape'
    try {
      eq(await select(), [{ a: 1, b: 7 }], '(d) after ALTER')
    } catch (err) {
      if (err.code !== '0A000') throw err
      outcome = '0A000'
    }
    eq(await select(), [{ a: 1, b: 7 }], '(d) after ALTER, again')
    await sql.unsafe(`DROP TABLE ${tbl}`)
    return `recovered from a, b, c, d (${outcome} after ALTER)`
  }

  s.S6 = async (scope) => {
    const sql = open(scope)
    const tbl = table(driver, 's6')
    await sql.unsafe(`DROP TABLE IF EXISTS ${tbl}; CREATE TABLE ${tbl} (id int, v text)`)
    const rows = 100000
    function* lines() {
      for (let i = 1; i <= rows; i += 1000) {
        let chunk = ''
        for (let j = i; j < i + 1000; j++) chunk += `${j}\trow ${j}\n`
        yield chunk
      }
    }
    await pipeline(Readable.from(lines()), await sql.unsafe(`COPY ${tbl} (id, v) FROM STDIN`).writable())
    eq((await sql.unsafe(`SELECT count(*)::int AS n FROM ${tbl}`))[0].n, rows, 'rows after COPY FROM')
    const out = await sql.unsafe(`COPY (SELECT id, v FROM ${tbl} ORDER BY id) TO STDOUT`).readable()
    let tail = ''
    let outLines = 0
    // Flowing mode: reading with `for await` can leave postgres.js' socket paused after the last chunk
    // (the stream ends while the socket waits for a read() that never comes), so the next query hangs;
    // seen directly against PostgreSQL too.
    await new Promise((resolve, reject) => {
      out.on('data', (chunk) => {
        tail = (tail + chunk.toString()).slice(-64)
        outLines += chunk.toString().split('\n').length - 1
      })
      out.on('end', resolve).on('error', reject)
    })
    eq(outLines, rows, 'COPY TO lines')
    check(tail.endsWith(`${rows}\trow ${rows}\n`), `COPY TO ends with ${JSON.stringify(tail)}`)
    // A COPY the server rejects is not reported on postgres.js' writable stream (it just finishes, also
    // directly against PostgreSQL); what can be checked is that nothing was copied and the connection works.
    const bad = await sql.unsafe(`COPY ${tbl} (id, v) FROM STDIN`).writable()
    bad.on('error', () => {})
    bad.write('1\tok\n')
    bad.end('not-an-int\tbad\n')
    eq(await countAfterCopy(sql, tbl), rows, 'rows after the bad row')
    const aborted = await sql.unsafe(`COPY ${tbl} (id, v) FROM STDIN`).writable()
    const abortErr = new Promise((resolve) => aborted.on('error', resolve))
    aborted.write('1\tabandoned\n')
    aborted.destroy(new Error('matrix CopyFail'))
    eq((await within(5000, abortErr, 'CopyFail')).message, 'matrix CopyFail', 'CopyFail stream error')
    eq(await countAfterCopy(sql, tbl), rows, 'rows after the failed COPYs')
    await sql.unsafe(`DROP TABLE ${tbl}`)
    return `${rows} rows in, ${outLines} out; a bad row and a CopyFail copied nothing, connection fine after`
  }

  s.S7 = async (scope) => {
    const sql = open(scope)
    const bg = startBackground(scope, 's7')
    let count = 0
    let sum = 0
    try {
      await sql.begin(async (tx) => {
        for await (const batch of tx`SELECT id, v FROM big`.cursor(1000)) {
          for (const row of batch) {
            count++
            sum += row.id
          }
        }
      })
    } finally {
      await bg.stop()
    }
    eq(count, BIG_ROWS, 'rows streamed')
    eq(sum, BIG_ID_SUM, 'sum of ids streamed')
    checkBackground(bg, 'S7')
    return `${count} rows through .cursor(1000) in a txn; 4 others did ${bg.txns} txns meanwhile (slowest ${bg.maxLatencyMs} ms)`
  }

  s.S8 = async (scope, oracle) => {
    const sql = open(scope)
    await sql`SELECT 1`
    const bg = startBackground(scope, 's8')
    let elapsed
    try {
      await sleep(100)
      const query = sql`SELECT pg_sleep(30)`
      const outcome = query.then(() => null, (err) => err)
      await sleep(200)
      const t0 = Date.now()
      query.cancel()
      const err = await within(2000, outcome, 'cancel')
      elapsed = Date.now() - t0
      check(err !== null, 'pg_sleep(30) finished instead of being cancelled')
      check(err.code === '57014', `cancel gave ${err.code}: ${err.message}`)
      eq(await oracle.sleepersStillActive(), 0, 'pg_sleep(30) still running on the server 2 s after the cancel')
      eq((await sql`SELECT ${8}::int AS x`)[0].x, 8, 'query after cancel')
    } finally {
      await bg.stop()
    }
    checkBackground(bg, 'S8')
    return `57014 ${elapsed} ms after query.cancel(); the connection works; 4 others did ${bg.txns} txns, none cancelled`
  }

  s.S9 = async (scope) => {
    const tag = randomTag()
    const notices = [[], []]
    const conns = notices.map((seen) => open(scope, { onnotice: (n) => seen.push(n.message) }))
    await Promise.all(
      conns.map(async (sql, i) => {
        for (let r = 0; r < 5; r++) await sql`SELECT notice(${`${tag}-${i}-${r}`})`
      }),
    )
    notices.forEach((seen, i) => eq(seen, [0, 1, 2, 3, 4].map((r) => `hello ${tag}-${i}-${r}`), `notices of client ${i}`))
    const listener = open(scope, {
      port: cfg.directPort,
      user: cfg.directUser,
      pass: cfg.directPassword,
      connection: { application_name: 'matrix-listener' },
    })
    const channel = table(driver, 's9')
    let heard
    const got = new Promise((resolve) => (heard = resolve))
    await listener.listen(channel, (payload) => heard(payload))
    const payload = `payload ${tag} ✓`
    await conns[0].notify(channel, payload)
    eq(await within(5000, got, 'NOTIFY through the pooler'), payload, 'notification payload')
    return '10 notices each reached their own client; NOTIFY reached a direct LISTEN'
  }

  s.S10 = async (scope) => {
    const sql = open(scope)
    await expectError(
      sql.begin(async (tx) => {
        await tx`SET LOCAL statement_timeout = '100ms'`
        await tx`SELECT pg_sleep(${1})`
      }),
      '57014',
      'pg_sleep(1) under SET LOCAL',
    )
    await sql.begin((tx) => tx`SELECT pg_sleep(${0.3})`)
    const a = open(scope)
    const b = open(scope)
    await a.unsafe(`SET search_path = ${LEAK_PATH}`)
    const show = async (c) => (await c`SHOW search_path`)[0].search_path
    for (let r = 0; r < 20; r++) {
      eq(await show(a), LEAK_PATH, `round ${r}: A's search_path`)
      check((await show(b)) !== LEAK_PATH, `round ${r}: B sees A's search_path`)
      await b.begin(async (tx) => {
        const [inB, inA] = await Promise.all([show(tx), show(a)])
        check(inB !== LEAK_PATH, `round ${r}: B (in txn) sees A's search_path`)
        eq(inA, LEAK_PATH, `round ${r}: A's search_path while B is in a txn`)
      })
    }
    return 'SET LOCAL statement_timeout honoured then gone; session search_path stayed with A over 20 rounds, never seen by B'
  }

  s.S12 = async (scope) => {
    const sql = open(scope)
    const run = async (what) => {
      for (let r = 0; r < 3; r++) {
        const [row] = await sql`SELECT ${r}::int + 1 AS x, v FROM t WHERE id = ${r + 1}`
        eq(canon(row), { v: `value ${r + 1}`, x: r + 1 }, `${what} run ${r}`)
      }
    }
    await run('before')
    for (const reset of ['DEALLOCATE ALL', 'DISCARD ALL']) {
      await sql.unsafe(reset)
      await run(`after ${reset}`)
    }
    return 'statements re-prepared after DEALLOCATE ALL and DISCARD ALL (driver retry)'
  }

  s.S15 = async (scope) => {
    const sql = open(scope)
    await sql`SELECT 1`
    const order = []
    const values = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        sql`SELECT ${i}::int AS i`.then((r) => {
          order.push(i)
          return r[0].i
        }),
      ),
    )
    eq(values, [...Array(100).keys()], 'pipelined results')
    eq(order, [...Array(100).keys()], 'completion order')
    return '100 queries in flight on one connection answered in order'
  }

  s.S16 = async (scope) => {
    // host: a directory: postgres.js then connects to <dir>/.s.PGSQL.<port>, as libpq would.
    const conns = Array.from({ length: S16.clients }, () => open(scope, { host: cfg.socketDir }))
    const seen = await Promise.all(
      conns.map(async (sql) => {
        const rows = []
        for (let n = 0; n < S16.txns; n++) {
          rows.push(await sql.begin(async (tx) => (await tx.unsafe(S16.sql))[0]))
        }
        return rows
      }),
    )
    return judgeSocket(seen.flat())
  }

  // S13: names are `<random per connection><n>`, so two connections never share one.
  const ids = ['S1', 'S2', 'S3', 'S4', 'S5', 'S6', 'S7', 'S8', 'S9', 'S10', 'S12', 'S15', 'S16']
  return ids.map((id) => ({ id, fn: s[id] }))
}
