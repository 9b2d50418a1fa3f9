package matrix;

import static matrix.Failures.check;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.List;
import java.util.Properties;

/**
 * S17, two routes of one pooler, each logged in as another user, used by one driver at once (issue 30).
 * Connection A goes to MATRIX_ROUTE_A as MATRIX_ROUTE_A_USER, B to MATRIX_ROUTE_B as MATRIX_ROUTE_B_USER, both on
 * MATRIX_ROUTES_PGPORT; 20 rounds of interleaved transactions run the same parameterised statement on
 * each. Past prepareThreshold pgjdbc prepares it on each connection under the same name ({@code S_1}), so
 * each route's pool must keep its own statement.
 */
final class Routes {
    private Routes() {}

    static final int ROUNDS = 20;

    record Route(String name, String database, String user, String password) {}

    private static String env(String key, String def) {
        String v = System.getenv(key);
        return v == null || v.isEmpty() ? def : v;
    }

    static String s17Routes(Run r) throws Exception {
        int port = Integer.parseInt(env("MATRIX_ROUTES_PGPORT", Integer.toString(r.env.port())));
        List<Route> routes = List.of(
                new Route("A", env("MATRIX_ROUTE_A", r.env.database()), env("MATRIX_ROUTE_A_USER", "pgmux_plain"),
                        env("MATRIX_ROUTE_A_PASSWORD", "")),
                new Route("B", env("MATRIX_ROUTE_B", r.env.database()), env("MATRIX_ROUTE_B_USER", "pgmux_md5"),
                        env("MATRIX_ROUTE_B_PASSWORD", "")));
        Connection[] conns = new Connection[routes.size()];
        PreparedStatement[] statements = new PreparedStatement[routes.size()];
        for (int k = 0; k < routes.size(); k++) {
            Route route = routes.get(k);
            Properties props = r.props(r.app());
            props.setProperty("user", route.user());
            props.setProperty("password", route.password());
            String url = "jdbc:postgresql://" + r.env.host() + ":" + port + "/" + route.database();
            conns[k] = r.connect(url, props);
            conns[k].setAutoCommit(false);
            statements[k] = conns[k].prepareStatement("SELECT current_user::text, ?::int + 1");
        }
        for (int i = 0; i < ROUNDS; i++) {
            for (int k = 0; k < routes.size(); k++) {
                Route route = routes.get(k);
                statements[k].setInt(1, i);
                try (ResultSet rs = statements[k].executeQuery()) {
                    check(rs.next(), "route " + route.name() + " round " + i + ": no row");
                    String who = rs.getString(1);
                    int n = rs.getInt(2);
                    check(who.equals(route.user()) && n == i + 1, "route " + route.name() + " round " + i + ": got ("
                            + who + ", " + n + "), want (" + route.user() + ", " + (i + 1) + ")");
                }
            }
            for (int k = routes.size() - 1; k >= 0; k--) {
                conns[k].commit();
            }
        }
        return ROUNDS + " interleaved txns each: " + routes.get(0).database() + " as " + routes.get(0).user() + ", "
                + routes.get(1).database() + " as " + routes.get(1).user() + ", one statement text on both";
    }
}
