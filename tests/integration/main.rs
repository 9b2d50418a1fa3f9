//! Integration tests: pgmux in front of a real, throwaway PostgreSQL, driven by tokio-postgres, psql and
//! hand-written protocol bytes.

use pgmux_testkit::fixture as common;

mod auth_hba;
mod auth_plain;
mod auth_query;
mod auth_routes;
mod basics;
mod console_routes;
mod failures;
mod figures;
mod log_capture;
mod overload;
mod params;
mod pgbouncer_ini;
mod pooling;
mod protocol;
mod readers;
mod readers_silent;
mod resilience;
mod routes;
mod server_queries;
mod settings;
mod sizing;
mod startup_params;
mod statements;
mod timeouts;
mod tls;
mod unix;
