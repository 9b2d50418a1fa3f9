// S17: two routes of one pooler, each logged in as another user, used by one driver at once (issue 30).
// Connection A goes to MATRIX_ROUTE_A as MATRIX_ROUTE_A_USER, B to MATRIX_ROUTE_B as MATRIX_ROUTE_B_USER, both on
// MATRIX_ROUTES_PGPORT; 20 rounds of interleaved transactions (BEGIN A, BEGIN B, the same parameterised
// statement on each, COMMIT B, COMMIT A). In the cache mode pgx prepares that text once per connection
// under the same name (`stmtcache_<hash>`), so each route's pool must keep its own statement.
package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

const s17Rounds = 20

// s17Route is one of the two: where a connection goes and as whom.
type s17Route struct{ name, database, user, password string }

func s17Routes(r *run) (string, error) {
	get := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	port, err := strconv.Atoi(get("MATRIX_ROUTES_PGPORT", strconv.Itoa(r.env.port)))
	if err != nil {
		return "", fmt.Errorf("MATRIX_ROUTES_PGPORT: %w", err)
	}
	routes := []s17Route{
		{"A", get("MATRIX_ROUTE_A", r.env.database), get("MATRIX_ROUTE_A_USER", "pgmux_plain"),
			get("MATRIX_ROUTE_A_PASSWORD", "")},
		{"B", get("MATRIX_ROUTE_B", r.env.database), get("MATRIX_ROUTE_B_USER", "pgmux_md5"),
			get("MATRIX_ROUTE_B_PASSWORD", "")},
	}
	opened := make([]*pgx.Conn, 0, len(routes))
	for _, rt := range routes {
		u := url.URL{
			Scheme:   "postgres",
			User:     url.UserPassword(rt.user, rt.password),
			Host:     net.JoinHostPort(r.env.host, strconv.Itoa(port)),
			Path:     "/" + rt.database,
			RawQuery: url.Values{"application_name": {r.app()}}.Encode(),
		}
		cfg, err := pgx.ParseConfig(u.String())
		if err != nil {
			return "", fmt.Errorf("route %s: %w", rt.name, err)
		}
		cfg.DefaultQueryExecMode = r.drv.mode
		cfg.ConnectTimeout = 10 * time.Second
		conn, err := r.connectWith(cfg)
		if err != nil {
			return "", fmt.Errorf("route %s (%s as %s): %w", rt.name, rt.database, rt.user, err)
		}
		opened = append(opened, conn)
	}
	const sql = "SELECT current_user::text, $1::int + 1"
	for i := range s17Rounds {
		for k, c := range opened {
			if _, err := c.Exec(r.ctx, "BEGIN"); err != nil {
				return "", fmt.Errorf("route %s round %d: BEGIN: %w", routes[k].name, i, err)
			}
		}
		for k, c := range opened {
			var who string
			var n int
			if err := c.QueryRow(r.ctx, sql, i).Scan(&who, &n); err != nil {
				return "", fmt.Errorf("route %s round %d: %w", routes[k].name, i, err)
			}
			if who != routes[k].user || n != i+1 {
				return "", fmt.Errorf("route %s round %d: got (%s, %d), want (%s, %d)",
					routes[k].name, i, who, n, routes[k].user, i+1)
			}
		}
		for k := len(opened) - 1; k >= 0; k-- {
			if _, err := opened[k].Exec(r.ctx, "COMMIT"); err != nil {
				return "", fmt.Errorf("route %s round %d: COMMIT: %w", routes[k].name, i, err)
			}
		}
	}
	return fmt.Sprintf("%d interleaved txns each: %s as %s, %s as %s, one statement text on both",
		s17Rounds, routes[0].database, routes[0].user, routes[1].database, routes[1].user), nil
}
