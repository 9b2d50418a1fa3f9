// Node suite of the driver matrix (tests/drivers/README.md): node-postgres at its defaults (`pg`), with
// `name:` on every query (`pg-named`), and postgres.js at its defaults (`postgres.js`).
//
//   node tests/drivers/node/matrix.mjs
//
// MATRIX_DRIVERS / MATRIX_SCENARIOS (comma-separated) narrow a run while developing; the runner sets
// neither, and a narrowed run says so on stderr.

import { Oracle, Report, cfg, describeError } from './lib/harness.mjs'
import { nodePostgres } from './lib/node-postgres.mjs'
import { postgresJs } from './lib/postgresjs.mjs'

const drivers = [
  ['pg', () => nodePostgres('pg', false)],
  ['pg-named', () => nodePostgres('pg-named', true)],
  ['postgres.js', () => postgresJs('postgres.js')],
]

const only = (name) => (process.env[name] || '').split(',').filter(Boolean)
const onlyDrivers = only('MATRIX_DRIVERS')
const onlyScenarios = only('MATRIX_SCENARIOS')
if (onlyDrivers.length + onlyScenarios.length > 0) {
  process.stderr.write(`narrowed run: drivers ${onlyDrivers} scenarios ${onlyScenarios}\n`)
}

// A stray rejection from a connection a scenario already gave up on must not end the suite.
process.on('unhandledRejection', () => {})

const report = new Report()
const oracle = new Oracle()
try {
  await oracle.open()
} catch (err) {
  process.stdout.write(`node oracle FAIL cannot reach PostgreSQL directly on port ${cfg.directPort}: ${describeError(err)}\n`)
  process.stdout.write('0 passed, 1 failed\n')
  process.exit(0)
}

const plan = drivers
  .filter(([driver]) => onlyDrivers.length === 0 || onlyDrivers.includes(driver))
  .flatMap(([driver, make]) => make().map((s) => ({ driver, ...s })))
  .filter(({ id }) => onlyScenarios.length === 0 || onlyScenarios.includes(id))

// The contract's bound for the whole suite: a scenario starts only if its own timeout still fits.
const budgetMs = cfg.timeoutS * (plan.length + 1) * 1000
const started = Date.now()
for (const { driver, id, fn } of plan) {
  if (Date.now() - started + cfg.timeoutS * 1000 > budgetMs) {
    report.line(driver, id, false, `not run: the suite's ${budgetMs / 1000} s budget is spent`)
    continue
  }
  await report.run(driver, id, oracle, (scope) => fn(scope, oracle))
}
await oracle.close()
process.stderr.write(`node suite: ${((Date.now() - started) / 1000).toFixed(1)} s\n`)
process.stdout.write(`${report.passed} passed, ${report.failed} failed\n`)
process.exit(0)
