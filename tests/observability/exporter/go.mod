// A module that exists only to pin prometheus-community/pgbouncer_exporter for the observability tests:
// `go install …@version` is refused by the module proxy here, `go build -mod=mod` of a required package works.
module pgmux.test/tools

go 1.25.0

require github.com/prometheus-community/pgbouncer_exporter v0.12.1
