package matrix;

import java.time.Duration;

/** The contract between the runner and a suite (tests/drivers/README.md), read from the environment. */
record Env(
        String host,
        int port,
        String socketDir,
        String user,
        String password,
        String database,
        int directPort,
        String directUser,
        String directPassword,
        int clients,
        int txns,
        int poolMax,
        Duration timeout) {

    static Env load() {
        int port = num("PGPORT", 5432);
        return new Env(
                str("PGHOST", "127.0.0.1"),
                port,
                str("MATRIX_SOCKET_DIR", "/tmp"),
                str("PGUSER", "pgmux_app"),
                str("PGPASSWORD", ""),
                str("PGDATABASE", "pgmux"),
                num("DIRECT_PGPORT", port),
                str("DIRECT_PGUSER", "postgres"),
                str("DIRECT_PGPASSWORD", ""),
                num("MATRIX_CLIENTS", 50),
                num("MATRIX_TXNS", 100),
                num("MATRIX_POOL_MAX", 2),
                Duration.ofSeconds(num("MATRIX_TIMEOUT_S", 60)));
    }

    /** Whether the suite talks to PostgreSQL itself, where the pool-size check means nothing. */
    boolean direct() {
        return port == directPort;
    }

    String url(int port) {
        return "jdbc:postgresql://" + host + ":" + port + "/" + database;
    }

    private static String str(String key, String def) {
        String v = System.getenv(key);
        return v == null || v.isEmpty() ? def : v;
    }

    private static int num(String key, int def) {
        String v = str(key, Integer.toString(def));
        try {
            int n = Integer.parseInt(v);
            if (n > 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IllegalArgumentException(key + "=\"" + v + "\" is not a positive integer");
    }
}
