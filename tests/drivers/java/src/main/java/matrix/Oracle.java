package matrix;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.Properties;

/**
 * The oracle: superuser connections straight to PostgreSQL (DIRECT_PGPORT) that check what the server saw,
 * independently of pgmux and of the driver under test.
 */
final class Oracle implements AutoCloseable {
    private final Env env;
    private Connection conn;

    Oracle(Env env) {
        this.env = env;
    }

    /** A new direct connection, for the sampler and for LISTEN; the caller closes it. */
    Connection open() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", env.directUser());
        p.setProperty("password", env.directPassword());
        p.setProperty("ApplicationName", "matrix-oracle");
        p.setProperty("prepareThreshold", "0");
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", "30");
        try {
            return DriverManager.getConnection(env.url(env.directPort()), p);
        } catch (SQLException e) {
            throw new SQLException("oracle (direct port " + env.directPort() + "): " + e.getMessage(), e.getSQLState(), e);
        }
    }

    private synchronized Connection conn() throws SQLException {
        if (conn == null || conn.isClosed()) {
            conn = open();
        }
        return conn;
    }

    /** Runs one oracle query and returns its single row's long columns. */
    synchronized long[] row(String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = conn().prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                ps.setObject(i + 1, args[i]);
            }
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                long[] out = new long[rs.getMetaData().getColumnCount()];
                for (int i = 0; i < out.length; i++) {
                    out[i] = rs.getLong(i + 1);
                }
                return out;
            }
        } catch (SQLException e) {
            closeQuietly();
            throw e;
        }
    }

    synchronized void exec(String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = conn().prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                ps.setObject(i + 1, args[i]);
            }
            ps.execute();
        } catch (SQLException e) {
            closeQuietly();
            throw e;
        }
    }

    static final String BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE usename = ? "
            + "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
            + "AND application_name IS DISTINCT FROM 'pgmux-probe'";

    /**
     * Gives the server up to {@code wait} to settle; returns null, or why a backend of the application user
     * is still idle in a transaction.
     */
    String waitNoIdleInTransaction(Duration wait) {
        Instant end = Instant.now().plus(wait);
        while (true) {
            String problem;
            try {
                long n = row("SELECT count(*) FROM pg_stat_activity WHERE usename = ? "
                        + "AND state LIKE 'idle in transaction%'", env.user())[0];
                if (n == 0) {
                    return null;
                }
                problem = n + " backend(s) of " + env.user() + " left idle in transaction";
            } catch (SQLException e) {
                problem = "oracle: " + Failures.describe(e);
            }
            if (Instant.now().isAfter(end)) {
                return problem;
            }
            sleep(100);
        }
    }

    /** Waits until no backend of the application user runs {@code query}: a cancel that must reach the server. */
    void waitNoActive(String query, Duration wait) throws Exception {
        Instant end = Instant.now().plus(wait);
        while (row("SELECT count(*) FROM pg_stat_activity WHERE usename = ? AND state = 'active' AND query = ?",
                env.user(), query)[0] > 0) {
            if (Instant.now().isAfter(end)) {
                throw new Failures.Check("\"" + query + "\" still running on the server " + wait.toMillis() + " ms later");
            }
            sleep(50);
        }
    }

    /**
     * Waits until a backend of the application user runs {@code query}, so that a cancel is sent while the
     * query is really running; false if it never showed up within {@code wait}.
     */
    boolean waitActive(String query, Duration wait) {
        Instant end = Instant.now().plus(wait);
        try {
            while (Instant.now().isBefore(end)) {
                if (row("SELECT count(*) FROM pg_stat_activity WHERE usename = ? AND state = 'active' AND query = ?",
                        env.user(), query)[0] > 0) {
                    return true;
                }
                sleep(20);
            }
        } catch (SQLException e) {
            // the caller cancels anyway
        }
        return false;
    }

    /** Polls the number of application backends on its own connection and keeps the largest count. */
    final class Sampler implements AutoCloseable {
        private final Thread thread;
        private volatile boolean stop;
        private volatile int max;
        private volatile int samples;
        private volatile SQLException error;

        Sampler() {
            thread = Run.daemon("sampler").newThread(this::loop);
            thread.start();
        }

        private void loop() {
            try (Connection c = open(); PreparedStatement ps = c.prepareStatement(BACKENDS)) {
                ps.setString(1, env.user());
                while (!stop) {
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        max = Math.max(max, rs.getInt(1));
                        samples++;
                    }
                    sleep(25);
                }
            } catch (SQLException e) {
                error = e;
            }
        }

        /** Stops sampling; returns the PASS fragment for the pool bound, or throws if it was broken. */
        String finish() throws Exception {
            close();
            if (error != null) {
                throw new Failures.Check("oracle sampler", error);
            }
            if (env.direct()) {
                return "pool check skipped (PGPORT is the direct port; " + max + " backends)";
            }
            Failures.check(samples > 0, "oracle took no sample of pg_stat_activity");
            Failures.check(max <= env.poolMax(), max + " backends of " + env.user()
                    + " at once, more than MATRIX_POOL_MAX=" + env.poolMax());
            return "≤ " + env.poolMax() + " backends (max seen " + max + " over " + samples + " samples)";
        }

        @Override
        public void close() {
            stop = true;
            try {
                thread.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    Sampler sampleBackends() {
        return new Sampler();
    }

    private synchronized void closeQuietly() {
        if (conn != null) {
            try {
                conn.close();
            } catch (SQLException e) {
                // broken already
            }
            conn = null;
        }
    }

    @Override
    public void close() {
        closeQuietly();
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
