//! Integration tests: pgmux in front of a real, throwaway PostgreSQL, driven by tokio-postgres, psql and
//! hand-written protocol bytes.

use pgmux_testkit::fixture as common;

mod basics;
mod console_routes;
mod failures;
mod figures;
mod params;
mod pooling;
mod protocol;
mod resilience;
mod routes;
mod settings;
mod sizing;
mod statements;
mod tls;
mod unix;
