// The field report's workload as a Lambda function: connect, `select now()`, sleep, `select now()`,
// disconnect. It talks to the pgmux extension on 127.0.0.1:5432, which pools the database connections of
// every invocation the execution environment runs (many at once on Lambda Managed Instances).
//
// Settings, all from the environment (node-postgres reads the PG* variables itself):
//   PGUSER, PGDATABASE  the database user and database pgmux serves (the user of its database URL,
//                       secret or IAM login); no password: pgmux trusts loopback clients in Lambda mode
//   PGHOST, PGPORT      default 127.0.0.1 and 5432, where pgmux listens in Lambda mode
//   SLEEP_MS            pause between the two queries, default 5000
//
// Runs anywhere with Node.js 20+ against any PostgreSQL:
//   PGPORT=5433 PGUSER=postgres SLEEP_MS=100 node -e 'import("./index.mjs").then(m => m.handler()).then(console.log)'

import pg from "pg";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function handler() {
  const sleepMs = Number(process.env.SLEEP_MS ?? 5000);
  const client = new pg.Client({
    host: process.env.PGHOST || "127.0.0.1",
    port: Number(process.env.PGPORT || 5432),
    connectionTimeoutMillis: 10_000,
    application_name: "pgmux-sample-function",
  });
  await client.connect();
  try {
    const first = await client.query("select now() as now");
    await sleep(sleepMs);
    const second = await client.query("select now() as now");
    return {
      first: first.rows[0].now.toISOString(),
      second: second.rows[0].now.toISOString(),
      sleptMs: sleepMs,
    };
  } finally {
    await client.end();
  }
}
