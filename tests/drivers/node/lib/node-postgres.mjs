// node-postgres (`pg`) scenarios. `named` runs every parameterised query with `name:` (a named prepared
// statement the client remembers for the life of the connection); otherwise queries take the driver's
// default path: simple Query without parameters, unnamed Parse/Bind/Execute/Sync with them.

import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import pg from 'pg'
import copyStreams from 'pg-copy-streams'
import QueryStream from 'pg-query-stream'
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
  S17,
  judgeRoutes,
  sampleBackends,
  sleep,
  table,
  within,
} from './harness.mjs'
import {
  BIG_ID_SUM,
  BIG_ROWS,
  S3_SQL,
  S3_VALUES,
  S4,
  checkS3Row,
  checkTRow,
  LEAK_PATH,
  ownSql,
  s4Id,
} from './fixtures.mjs'

export function nodePostgres(driver, named) {
  /** A query config: named when this driver names its statements. */
  const q = (name, text, values) => (named ? { name, text, values } : { text, values })

  function clientConfig(extra = {}) {
    return {
      host: cfg.host,
      port: cfg.port,
      user: cfg.user,
      password: cfg.password,
      database: cfg.database,
      application_name: `matrix-${driver}`,
      ...extra,
    }
  }

  async function connect(scope, extra = {}) {
    const client = new pg.Client(clientConfig(extra))
    client.on('error', () => {}) // a dead connection surfaces as the failing query's error
    scope.own(client, () =>
      within(3000, client.end(), 'end').catch(() => client.connection.stream.destroy()),
    )
    await client.connect()
    return client
  }

  const one = async (client, config) => (await client.query(config)).rows[0]

  /** BEGIN; fn; COMMIT, rolling back on error so that a failed client does not keep its server. */
  async function inTxn(client, fn) {
    await client.query('BEGIN')
    try {
      const result = await fn()
      await client.query('COMMIT')
      return result
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {})
      throw err
    }
  }

  // One S4-style transaction for background clients (S7, S8): read, audit, commit.
  async function backgroundTxn(client, tag, k, n) {
    await inTxn(client, async () => {
      const row = await one(client, q('bg_read', S4.read, [(n % 1000) + 1]))
      eq(row.v, `value ${(n % 1000) + 1}`, 'background read')
      await client.query(q('bg_audit', S4.audit, [`${driver}-${tag}:${k}`, n]))
    })
  }

  async function startBackground(scope, tag, workers = 4) {
    const clients = []
    for (let k = 0; k < workers; k++) clients.push(await connect(scope))
    return backgroundWork(workers, (k, n) => backgroundTxn(clients[k], tag, k, n))
  }

  const s = {}

  s.S1 = async (scope) => {
    const seen = {}
    const client = new pg.Client(clientConfig({ statement_timeout: 45000 }))
    client.on('error', () => {})
    client.connection.on('parameterStatus', (m) => (seen[m.parameterName] = m.parameterValue))
    scope.own(client, () => within(3000, client.end(), 'end').catch(() => client.connection.stream.destroy()))
    await client.connect()
    check(Number.parseInt(seen.server_version, 10) >= 12, `server_version ${seen.server_version} < 12`)
    const noise = []
    for (let i = 0; i < 4; i++) noise.push(await connect(scope, { application_name: `matrix-noise-${i}` }))
    const bg = backgroundWork(noise.length, (k) =>
      inTxn(noise[k], async () => {
        eq((await one(noise[k], q('s1_app', 'SHOW application_name'))).application_name, `matrix-noise-${k}`, 'noise application_name')
        eq((await one(noise[k], q('s1_st', 'SHOW statement_timeout'))).statement_timeout, '0', 'noise statement_timeout')
      }),
    )
    try {
      for (let n = 0; n < 100; n++) {
        checkBackground(bg, 'noise', false)
        await inTxn(client, async () => {
          eq((await one(client, q('s1_app', 'SHOW application_name'))).application_name, `matrix-${driver}`, `txn ${n} application_name`)
          eq((await one(client, q('s1_st', 'SHOW statement_timeout'))).statement_timeout, '45s', `txn ${n} statement_timeout`)
        })
      }
      eq((await one(client, 'SHOW application_name')).application_name, `matrix-${driver}`, 'application_name after 100 txns')
    } finally {
      await bg.stop()
    }
    checkBackground(bg, 'noise')
    return `server_version ${seen.server_version}; application_name and statement_timeout (startup) kept over 100 txns beside 4 other clients (${bg.txns} txns)`
  }

  s.S2 = async (scope) => {
    const client = await connect(scope)
    const results = await client.query('SELECT 1 AS a; SELECT 2 AS b')
    check(Array.isArray(results) && results.length === 2, `multi-statement gave ${JSON.stringify(results?.length)} results`)
    eq(results[0].rows, [{ a: 1 }], 'first statement')
    eq(results[1].rows, [{ b: 2 }], 'second statement')
    const empty = await client.query('')
    eq(empty.rows, [], 'empty query rows')
    check(empty.command === null, `empty query command ${empty.command}`)
    eq((await one(client, 'SELECT 3 AS c')).c, 3, 'query after the empty one')
    return 'SELECT 1; SELECT 2 gave two results; empty query answered'
  }

  s.S3 = async (scope) => {
    const client = await connect(scope)
    for (const [i, values] of S3_VALUES.entries()) {
      checkS3Row(await one(client, q('s3_types', S3_SQL, values)), values, `value set ${i}`)
    }
    for (const id of [1, 7, 1000]) {
      checkTRow(await one(client, q('s3_t', 'SELECT * FROM t WHERE id = $1', [id])), id, 'fixture')
    }
    return `${S3_VALUES.length} value sets of 10 types round-trip; 3 fixture rows match`
  }

  s.S4 = async (scope, oracle) => {
    await oracle.query('DELETE FROM audit WHERE client LIKE $1', [`${driver}:%`])
    const clients = []
    for (let k = 0; k < cfg.clients; k++) clients.push(await connect(scope))
    const sampler = sampleBackends(oracle)
    const errors = []
    try {
      await Promise.all(
        clients.map(async (client, k) => {
          const who = `${driver}:${k}`
          try {
            for (let n = 0; n < cfg.txns && !scope.stopped; n++) {
              const id = s4Id(k, n, cfg.txns)
              await client.query('BEGIN')
              const before = (await one(client, q('s4_lock', S4.lock, [id]))).f
              eq((await one(client, q('s4_bump', S4.bump, [id]))).f, before + 1, 'updated f')
              eq((await one(client, q('s4_read', S4.read, [id]))).v, `value ${id}`, 'read v')
              await client.query(q('s4_audit', S4.audit, [who, n]))
              eq((await one(client, q(`s4_own_${k}`, ownSql(k), [n]))).own, n + k, 'own statement')
              await client.query('COMMIT')
              eq((await one(client, q('s4_count', S4.count, [who]))).c, n + 1, 'audit rows so far')
            }
          } catch (err) {
            errors.push(err)
            await client.query('ROLLBACK').catch(() => {})
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
    const client = await connect(scope)
    const parts = []
    // (a) an error inside a transaction, then ROLLBACK
    await client.query('BEGIN')
    await expectError(client.query(q('s5a', 'SELECT 1 / $1::int', [0])), '22012', '(a) 1/0')
    await expectError(client.query('SELECT 1'), '25P02', '(a) statement in aborted txn')
    await client.query('ROLLBACK')
    await client.query('BEGIN')
    eq((await one(client, q('s5a_ok', 'SELECT $1::int AS x', [1]))).x, 1, '(a) next txn')
    await client.query('COMMIT')
    parts.push('a')
    // (b) a named statement whose Parse fails, then the same name with good SQL
    if (named) {
      await expectError(client.query({ name: 's5b', text: 'SELEC $1::int', values: [1] }), '42601', '(b) bad Parse')
      eq((await one(client, { name: 's5b', text: 'SELECT $1::int AS x', values: [5] })).x, 5, '(b) same name, good SQL')
      parts.push('b')
    }
    // (c) an error in the middle of a pipeline: each query has its own Sync, so only the middle one fails
    const piped = await connect(scope, { pipeline: true })
    const [p1, p2, p3] = [
      piped.query(q('s5c_1', 'SELECT $1::int AS x', [1])),
      piped.query(q('s5c_2', 'SELECT 1 / $1::int AS x', [0])),
      piped.query(q('s5c_3', 'SELECT $1::int + 2 AS x', [1])),
    ]
    await expectError(p2, '22012', '(c) pipelined 1/0')
    eq((await p1).rows[0].x, 1, '(c) before the error')
    eq((await p3).rows[0].x, 3, '(c) after the error')
    parts.push('c')
    // (d) a cached plan whose result type changes under it
    const tbl = table(driver, 's5d')
    await client.query(`DROP TABLE IF EXISTS ${tbl}; CREATE TABLE ${tbl} (a int); INSERT INTO ${tbl} VALUES (1)`)
    const select = q(`${tbl}_sel`, `SELECT * FROM ${tbl}`)
    eq((await client.query(select)).rows, [{ a: 1 }], '(d) before ALTER')
    eq((await client.query(select)).rows, [{ a: 1 }], '(d) before ALTER, again')
    await client.query(`ALTER TABLE ${tbl} ADD COLUMN b int DEFAULT 7`)
    let outcome
    try {
      eq((await client.query(select)).rows, [{ a: 1, b: 7 }], '(d) after ALTER')
      outcome = 'new shape'
    } catch (err) {
      if (err.code !== '0A000') throw err
      outcome = '0A000'
    }
    await client.query('BEGIN')
    eq((await one(client, q('s5d_ok', `SELECT count(*)::int AS n FROM ${tbl}`))).n, 1, '(d) next txn')
    await client.query('COMMIT')
    await client.query(`DROP TABLE ${tbl}`)
    parts.push(`d (${outcome} after ALTER)`)
    return `recovered from ${parts.join(', ')}`
  }

  s.S6 = async (scope) => {
    const client = await connect(scope)
    const tbl = table(driver, 's6')
    await client.query(`DROP TABLE IF EXISTS ${tbl}; CREATE TABLE ${tbl} (id int, v text)`)
    const rows = 100000
    function* lines() {
      for (let i = 1; i <= rows; i += 1000) {
        let chunk = ''
        for (let j = i; j < i + 1000; j++) chunk += `${j}\trow ${j}\n`
        yield chunk
      }
    }
    const ingest = client.query(copyStreams.from(`COPY ${tbl} (id, v) FROM STDIN`))
    await pipeline(Readable.from(lines()), ingest)
    eq(ingest.rowCount, rows, 'COPY FROM rowCount')
    eq((await one(client, `SELECT count(*)::int AS n FROM ${tbl}`)).n, rows, 'rows after COPY FROM')
    const out = client.query(copyStreams.to(`COPY (SELECT id, v FROM ${tbl} ORDER BY id) TO STDOUT`))
    let text = ''
    let outLines = 0
    for await (const chunk of out) {
      text = (text + chunk.toString()).slice(-64)
      outLines += chunk.toString().split('\n').length - 1
    }
    eq(outLines, rows, 'COPY TO lines')
    check(text.endsWith(`${rows}\trow ${rows}\n`), `COPY TO ends with ${JSON.stringify(text)}`)
    const bad = client.query(copyStreams.from(`COPY ${tbl} (id, v) FROM STDIN`))
    await expectError(pipeline(Readable.from(['1\tok\n', 'not-an-int\tbad\n']), bad), '22P02', 'COPY with a bad row')
    const aborted = client.query(copyStreams.from(`COPY ${tbl} (id, v) FROM STDIN`))
    aborted.write('1\tabandoned\n')
    const failed = new Promise((resolve) => aborted.on('error', resolve).on('close', resolve))
    aborted.destroy(new Error('matrix CopyFail'))
    const copyFail = await within(5000, failed, 'CopyFail')
    check(copyFail?.code === '57014', `CopyFail answered ${copyFail?.code} ${copyFail?.message}`)
    eq((await one(client, q('s6_count', `SELECT count(*)::int AS n FROM ${tbl}`))).n, rows, 'rows after the failed COPYs')
    await client.query(`DROP TABLE ${tbl}`)
    return `${rows} rows in, ${outLines} out; bad row 22P02 and CopyFail 57014, connection fine after`
  }

  s.S7 = async (scope) => {
    const client = await connect(scope)
    const bg = await startBackground(scope, 's7')
    let count = 0
    let sum = 0
    try {
      await client.query('BEGIN')
      const stream = client.query(new QueryStream('SELECT id, v FROM big', [], { batchSize: 1000 }))
      for await (const row of stream) {
        count++
        sum += row.id
      }
      await client.query('COMMIT')
    } finally {
      await bg.stop()
    }
    eq(count, BIG_ROWS, 'rows streamed')
    eq(sum, BIG_ID_SUM, 'sum of ids streamed')
    checkBackground(bg, 'S7')
    return `${count} rows through pg-query-stream in a txn; 4 others did ${bg.txns} txns meanwhile (slowest ${bg.maxLatencyMs} ms)`
  }

  s.S8 = async (scope, oracle) => {
    const client = await connect(scope)
    const bg = await startBackground(scope, 's8')
    let elapsed
    try {
      await sleep(100)
      const query = new pg.Query(q('s8_sleep', 'SELECT pg_sleep(30)'))
      const outcome = new Promise((resolve) => {
        query.on('error', resolve)
        query.on('end', () => resolve(null))
      })
      client.query(query)
      await sleep(200)
      const t0 = Date.now()
      const canceller = new pg.Client(clientConfig())
      canceller.connection.on('error', () => {})
      canceller.cancel(client, query)
      const err = await within(2000, outcome, 'cancel')
      elapsed = Date.now() - t0
      check(err !== null, 'pg_sleep(30) finished instead of being cancelled')
      check(err.code === '57014', `cancel gave ${err.code}: ${err.message}`)
      eq(await oracle.sleepersStillActive(), 0, 'pg_sleep(30) still running on the server 2 s after the cancel')
      eq((await one(client, q('s8_after', 'SELECT $1::int AS x', [8]))).x, 8, 'query after cancel')
    } finally {
      await bg.stop()
    }
    checkBackground(bg, 'S8')
    return `57014 ${elapsed} ms after client.cancel; the connection works; 4 others did ${bg.txns} txns, none cancelled`
  }

  s.S9 = async (scope) => {
    const tag = randomTag()
    const clients = [await connect(scope), await connect(scope)]
    const notices = [[], []]
    clients.forEach((c, i) => c.on('notice', (m) => notices[i].push(m.message)))
    await Promise.all(
      clients.map(async (c, i) => {
        for (let r = 0; r < 5; r++) await c.query(q('s9_notice', 'SELECT notice($1)', [`${tag}-${i}-${r}`]))
      }),
    )
    clients.forEach((_, i) =>
      eq(notices[i], [0, 1, 2, 3, 4].map((r) => `hello ${tag}-${i}-${r}`), `notices of client ${i}`),
    )
    const listener = await connect(scope, {
      port: cfg.directPort,
      user: cfg.directUser,
      password: cfg.directPassword,
      application_name: 'matrix-listener',
    })
    const channel = table(driver, 's9')
    const heard = new Promise((resolve) => listener.on('notification', resolve))
    await listener.query(`LISTEN ${channel}`)
    const payload = `payload ${tag} ✓`
    await clients[0].query(q('s9_notify', 'SELECT pg_notify($1, $2)', [channel, payload]))
    const msg = await within(5000, heard, 'NOTIFY through the pooler')
    eq([msg.channel, msg.payload], [channel, payload], 'notification')
    return '10 notices each reached their own client; NOTIFY reached a direct LISTEN'
  }

  s.S10 = async (scope) => {
    const client = await connect(scope)
    await client.query('BEGIN')
    await client.query("SET LOCAL statement_timeout = '100ms'")
    await expectError(client.query(q('s10_sleep1', 'SELECT pg_sleep($1)', [1])), '57014', 'pg_sleep(1) under SET LOCAL')
    await client.query('ROLLBACK')
    await client.query('BEGIN')
    await client.query(q('s10_sleep', 'SELECT pg_sleep($1)', [0.3]))
    await client.query('COMMIT')
    const a = await connect(scope)
    const b = await connect(scope)
    await a.query(`SET search_path = ${LEAK_PATH}`)
    const show = (c) => one(c, q('s10_show', 'SHOW search_path')).then((r) => r.search_path)
    for (let r = 0; r < 20; r++) {
      eq(await show(a), LEAK_PATH, `round ${r}: A's search_path`)
      check((await show(b)) !== LEAK_PATH, `round ${r}: B sees A's search_path`)
      await b.query('BEGIN')
      const [inB, inA] = await Promise.all([show(b), show(a)])
      check(inB !== LEAK_PATH, `round ${r}: B (in txn) sees A's search_path`)
      eq(inA, LEAK_PATH, `round ${r}: A's search_path while B is in a txn`)
      await b.query('COMMIT')
    }
    return 'SET LOCAL statement_timeout honoured then gone; session search_path stayed with A over 20 rounds, never seen by B'
  }

  s.S13 = async (scope) => {
    const specs = [
      { name: 'matrix_s13', text: "SELECT 'first'::text AS x", want: () => 'first' },
      { name: 'matrix_s13', text: "SELECT 'second'::text AS x", want: () => 'second' },
      { name: 'matrix_s13_same', text: 'SELECT $1::int * 10 AS x', want: (n) => n * 10, param: true },
      { name: 'matrix_s13_same', text: 'SELECT $1::int * 10 AS x', want: (n) => n * 10, param: true },
    ]
    const clients = []
    for (const _ of specs) clients.push(await connect(scope))
    await Promise.all(
      specs.map(async (spec, i) => {
        for (let n = 0; n < 20; n++) {
          const row = await one(clients[i], { name: spec.name, text: spec.text, values: spec.param ? [n] : [] })
          eq(row.x, spec.want(n), `client ${i} (${spec.name}) run ${n}`)
        }
      }),
    )
    return '2 clients with one name and different SQL, 2 with one name and the same SQL: 20 runs each, own results'
  }

  s.S15 = async (scope) => {
    const client = await connect(scope, { pipeline: true })
    const order = []
    const pending = Array.from({ length: 100 }, (_, i) =>
      client.query(q('s15', 'SELECT $1::int AS i', [i])).then((r) => {
        order.push(i)
        return r.rows[0].i
      }),
    )
    const values = await Promise.all(pending)
    eq(values, [...Array(100).keys()], 'pipelined results')
    eq(order, [...Array(100).keys()], 'completion order')
    return '100 pipelined queries (pipeline: true) answered in order'
  }

  s.S16 = async (scope) => {
    // host: a directory, as libpq takes it: node-postgres connects to <dir>/.s.PGSQL.<port>.
    const clients = []
    for (let i = 0; i < S16.clients; i++) clients.push(await connect(scope, { host: cfg.socketDir }))
    const seen = await Promise.all(
      clients.map(async (client) => {
        const rows = []
        for (let n = 0; n < S16.txns; n++) rows.push(await inTxn(client, () => one(client, q('s16', S16.sql, []))))
        return rows
      }),
    )
    return judgeSocket(seen.flat())
  }

  s.S17 = async (scope) => {
    // With names, both connections prepare `s17` with the same text, each on its own route's pool.
    const a = await connect(scope, { port: S17.port, ...S17.a })
    const b = await connect(scope, { port: S17.port, ...S17.b })
    const seenA = []
    const seenB = []
    for (let i = 0; i < S17.rounds; i++) {
      await inTxn(a, () =>
        inTxn(b, async () => {
          seenA.push(await one(a, q('s17', S17.sql, [i])))
          seenB.push(await one(b, q('s17', S17.sql, [i])))
        }),
      )
    }
    return judgeRoutes(seenA, seenB)
  }

  // pg with names has no simple-query or COPY variant of its own (those are the `pg` runs) and no way to
  // re-prepare after DEALLOCATE; plain pg has no statement names to collide (S13).
  const ids = named
    ? ['S1', 'S3', 'S4', 'S5', 'S7', 'S8', 'S9', 'S10', 'S13', 'S15', 'S16', 'S17']
    : ['S1', 'S2', 'S3', 'S4', 'S5', 'S6', 'S7', 'S8', 'S9', 'S10', 'S15', 'S16', 'S17']
  return ids.map((id) => ({ id, fn: s[id] }))
}
