// The runner contract of tests/drivers/README.md for the Node suites: environment, one line per
// scenario, a timeout per scenario, connections closed whatever happens, and the direct oracle.

import pg from 'pg'

const env = process.env

function int(name, fallback) {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number.parseInt(raw, 10)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}=${raw} is not a positive integer`)
  return n
}

export const cfg = {
  host: env.PGHOST || '127.0.0.1',
  port: int('PGPORT', 5432),
  socketDir: env.MATRIX_SOCKET_DIR || '/tmp',
  user: env.PGUSER || 'pgmux_app',
  password: env.PGPASSWORD || '',
  database: env.PGDATABASE || 'pgmux',
  directPort: int('DIRECT_PGPORT', int('PGPORT', 5432)),
  directUser: env.DIRECT_PGUSER || 'postgres',
  directPassword: env.DIRECT_PGPASSWORD || '',
  clients: int('MATRIX_CLIENTS', 50),
  txns: int('MATRIX_TXNS', 100),
  timeoutS: int('MATRIX_TIMEOUT_S', 60),
  poolMax: int('MATRIX_POOL_MAX', 2),
}

// When the suite talks to PostgreSQL itself there is no pool to stay within.
export const direct = cfg.port === cfg.directPort

// S16: clients and transactions each through the Unix socket, and the query whose answers say which backend
// served and whether its client had an address (a pooler's TCP connection) or none (a Unix-socket client of
// PostgreSQL itself).
export const S16 = { clients: 4, txns: 25, sql: 'SELECT pg_backend_pid() AS pid, inet_client_addr() IS NULL AS unix' }

/** S16's verdict on every { pid, unix } the transactions saw. */
export function judgeSocket(seen) {
  const total = S16.clients * S16.txns
  eq(seen.length, total, 'transactions through the socket')
  const unixClients = seen.filter((r) => r.unix).length
  const pids = new Set(seen.map((r) => Number(r.pid)))
  let client
  if (direct) {
    eq(unixClients, total, 'transactions with a Unix client')
    client = 'a Unix client'
  } else {
    eq(unixClients, 0, 'transactions on a Unix-socket backend')
    check(pids.size <= cfg.poolMax, `${pids.size} backends for MATRIX_POOL_MAX=${cfg.poolMax}`)
    client = "the pooler's TCP connection"
  }
  return `${total} txns through ${cfg.socketDir}/.s.PGSQL.${cfg.port}, ${pids.size} backends, each saw ${client}`
}

// S17: two routes of one pooler, each logged in as another user, used by one driver at once (issue 30):
// where they are, who each logs in as, how many interleaved rounds, and the statement both run.
export const S17 = {
  port: int('MATRIX_ROUTES_PGPORT', int('PGPORT', 5432)),
  a: {
    database: env.MATRIX_ROUTE_A || cfg.database,
    user: env.MATRIX_ROUTE_A_USER || 'pgmux_plain',
    password: env.MATRIX_ROUTE_A_PASSWORD || '',
  },
  b: {
    database: env.MATRIX_ROUTE_B || cfg.database,
    user: env.MATRIX_ROUTE_B_USER || 'pgmux_md5',
    password: env.MATRIX_ROUTE_B_PASSWORD || '',
  },
  rounds: 20,
  sql: 'SELECT current_user::text AS who, $1::int + 1 AS n',
}

/** S17's verdict on the { who, n } rows each route's connection saw, round by round. */
export function judgeRoutes(seenA, seenB) {
  for (const [route, user, seen] of [['A', S17.a.user, seenA], ['B', S17.b.user, seenB]]) {
    eq(seen.length, S17.rounds, `route ${route} rounds`)
    seen.forEach((row, i) => {
      eq(row.who, user, `route ${route} round ${i}: current_user`)
      eq(Number(row.n), i + 1, `route ${route} round ${i}: $1 + 1`)
    })
  }
  return `${S17.rounds} interleaved txns each: ${S17.a.database} as ${S17.a.user}, ${S17.b.database} as ${S17.b.user}, one statement text on both`
}

/** A failed check: the scenario prints FAIL with this message. */
export class CheckFailed extends Error {}

export function check(cond, message) {
  if (!cond) throw new CheckFailed(message)
}

export function eq(actual, expected, what) {
  const a = JSON.stringify(actual)
  const e = JSON.stringify(expected)
  if (a !== e) throw new CheckFailed(`${what}: got ${a}, want ${e}`)
}

/** `ERROR: message (SQLSTATE)` for server errors, the message alone for anything else. */
export function describeError(err) {
  if (err === undefined || err === null) return 'unknown error'
  const msg = (err.message || String(err)).split('\n')[0]
  if (err instanceof CheckFailed) return msg
  if (err.code && /^[0-9A-Z]{5}$/.test(err.code)) return `ERROR: ${msg} (${err.code})`
  return `${msg}${err.code ? ` [${err.code}]` : ''} (no SQLSTATE)`
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Resolves with `promise`, or rejects after `ms` with a message naming `what`. */
export function within(ms, promise, what) {
  let timer
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: no answer within ${ms} ms`)), ms)
  })
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer))
}

/** Expects `promise` to reject with `sqlstate`; returns the error. */
export async function expectError(promise, sqlstate, what) {
  let err
  try {
    await promise
  } catch (e) {
    err = e
  }
  check(err !== undefined, `${what}: succeeded, want SQLSTATE ${sqlstate}`)
  if (err.code !== sqlstate) throw new CheckFailed(`${what}: want ${sqlstate}, got ${describeError(err)}`)
  return err
}

/**
 * What a scenario opened. Everything registered here is closed when the scenario ends, passes, fails or
 * times out; a closer that does not finish in 5 s is abandoned (its socket is destroyed by the closer).
 */
export class Scope {
  constructor() {
    this.closers = []
    this.stopped = false
  }

  /** Registers `close` (async, must not throw for a dead connection) and returns `thing`. */
  own(thing, close) {
    this.closers.push(close)
    return thing
  }

  async closeAll() {
    this.stopped = true
    const closers = this.closers.splice(0).reverse()
    await Promise.all(
      closers.map((close) => within(5000, Promise.resolve().then(close), 'close').catch(() => {})),
    )
  }
}

export class Oracle {
  async open() {
    this.client = new pg.Client({
      host: cfg.host,
      port: cfg.directPort,
      user: cfg.directUser,
      password: cfg.directPassword,
      database: cfg.database,
      application_name: 'matrix-oracle',
    })
    this.client.on('error', () => {})
    await this.client.connect()
  }

  async query(text, values) {
    return (await this.client.query(text, values)).rows
  }

  /** Pool backends of the application role now (the oracle is another role, so never counted; pgmux's probe
   * connection, `pgmux-probe`, is not the pool's: see tests/drivers/README.md). */
  async appBackends() {
    const rows = await this.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE usename = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
          AND application_name IS DISTINCT FROM 'pgmux-probe'`,
      [cfg.user],
    )
    return rows[0].n
  }

  /** Application backends `idle in transaction`, waiting up to `ms` for them to go away. */
  async idleInTransaction(ms = 3000) {
    const deadline = Date.now() + ms
    for (;;) {
      const rows = await this.query(
        `SELECT pid, state, left(query, 60) AS query FROM pg_stat_activity
          WHERE usename = $1 AND state LIKE 'idle in transaction%'`,
        [cfg.user],
      )
      if (rows.length === 0 || Date.now() > deadline) return rows
      await sleep(100)
    }
  }

  /**
   * Application backends still running `SELECT pg_sleep(30)`, waiting up to `ms` for them to stop. A
   * cancelled backend sends its ErrorResponse before it reports itself idle, and node-postgres raises the
   * error on the ErrorResponse, so an immediate look can still see it active; one that was never
   * cancelled stays active for 30 s.
   */
  async sleepersStillActive(ms = 2000) {
    const deadline = Date.now() + ms
    for (;;) {
      const rows = await this.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE usename = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep(30)%'`,
        [cfg.user],
      )
      if (rows[0].n === 0 || Date.now() > deadline) return rows[0].n
      await sleep(50)
    }
  }

  async close() {
    await within(5000, this.client.end(), 'oracle close').catch(() => this.client.connection.stream.destroy())
  }
}

/** Samples the application's backend count until stopped; `max` is the highest seen. */
export function sampleBackends(oracle) {
  const sampler = { max: 0, samples: 0, running: true }
  sampler.done = (async () => {
    while (sampler.running) {
      const n = await oracle.appBackends()
      sampler.max = Math.max(sampler.max, n)
      sampler.samples++
      await sleep(20)
    }
  })()
  sampler.stop = async () => {
    sampler.running = false
    await sampler.done.catch(() => {})
    return sampler.max
  }
  return sampler
}

/** Collects results; prints one line per scenario and the closing count. */
export class Report {
  constructor() {
    this.passed = 0
    this.failed = 0
  }

  line(driver, id, ok, detail) {
    if (ok) this.passed++
    else this.failed++
    const text = String(detail).replace(/\s+/g, ' ').trim()
    process.stdout.write(`${driver} ${id} ${ok ? 'PASS' : 'FAIL'} ${text}\n`)
  }

  /**
   * Runs one scenario: `fn(scope)` resolves with the PASS detail or throws. Ends within the scenario
   * timeout plus the close allowance, then checks that nothing is left `idle in transaction`.
   */
  async run(driver, id, oracle, fn) {
    const scope = new Scope()
    const started = Date.now()
    let ok = false
    let detail
    try {
      detail = await within(cfg.timeoutS * 1000, fn(scope), `timeout after ${cfg.timeoutS} s`)
      ok = true
    } catch (err) {
      detail = describeError(err)
    }
    await scope.closeAll()
    try {
      const stuck = await oracle.idleInTransaction()
      if (stuck.length > 0 && ok) {
        ok = false
        detail = `backends left idle in transaction: ${stuck.map((r) => `${r.pid} ${r.query}`).join('; ')}`
      }
    } catch (err) {
      if (ok) {
        ok = false
        detail = `oracle: ${describeError(err)}`
      }
    }
    const secs = ((Date.now() - started) / 1000).toFixed(1)
    this.line(driver, id, ok, `${detail} [${secs} s]`)
  }
}

/** Runs `workers` loops of `step(k, n)` until `stop()` says so; collects errors and latencies. */
export function backgroundWork(workers, step) {
  const bg = { txns: 0, errors: [], maxLatencyMs: 0, running: true, perWorker: new Array(workers).fill(0) }
  bg.done = Promise.all(
    Array.from({ length: workers }, async (_, k) => {
      for (let n = 0; bg.running; n++) {
        const t0 = Date.now()
        try {
          await step(k, n)
        } catch (err) {
          bg.errors.push(err)
          return
        }
        bg.maxLatencyMs = Math.max(bg.maxLatencyMs, Date.now() - t0)
        bg.txns++
        bg.perWorker[k]++
      }
    }),
  )
  bg.stop = async () => {
    bg.running = false
    await bg.done
    return bg
  }
  return bg
}

/** Throws if a background worker failed; at the end (`final`), also unless every one made progress. */
export function checkBackground(bg, what, final = true) {
  if (bg.errors.length > 0) {
    throw new CheckFailed(`${what}: other client failed: ${describeError(bg.errors[0])}`)
  }
  if (!final) return
  check(
    bg.perWorker.every((n) => n > 0),
    `${what}: other clients stalled (${bg.perWorker.join(',')} txns)`,
  )
}

/** Table name for a driver's own fixtures: `pg-named` → `pg_named_s6`. */
export function table(driver, scenario) {
  return `${driver.replace(/[^a-z0-9]+/gi, '_').replace(/_$/, '')}_${scenario}`.toLowerCase()
}

export function randomTag() {
  return Math.random().toString(36).slice(2, 10)
}
