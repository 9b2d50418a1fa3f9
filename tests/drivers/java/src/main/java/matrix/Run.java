package matrix;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/** One scenario of one driver: its deadline and every connection and thread it opened. */
final class Run {
    final Env env;
    final Main.Driver driver;
    final Oracle oracle;
    final Instant deadline;

    private final List<Connection> conns = new ArrayList<>();
    private final List<ExecutorService> pools = new ArrayList<>();

    Run(Env env, Main.Driver driver, Oracle oracle, Instant deadline) {
        this.env = env;
        this.driver = driver;
        this.oracle = oracle;
        this.deadline = deadline;
    }

    /** The application_name this driver announces. */
    String app() {
        return "matrix-" + driver.name();
    }

    /** A scratch table named after the driver, as the contract asks ({@code pgjdbc_prepare0_s6}). */
    String table(String suffix) {
        return driver.name().replace('-', '_') + "_" + suffix;
    }

    boolean expired() {
        return Instant.now().isAfter(deadline);
    }

    Duration remaining() {
        Duration d = Duration.between(Instant.now(), deadline);
        return d.isNegative() ? Duration.ZERO : d;
    }

    /** Throws once the scenario's deadline has passed, for loops with a fixed amount of work. */
    void checkTime() throws Failures.Check {
        if (expired()) {
            throw new Failures.Check("deadline passed (MATRIX_TIMEOUT_S)");
        }
    }

    /**
     * The driver's connection properties: its prepareThreshold and application name, and socket
     * timeouts so that no read outlives the scenario by much even if the runner's abort is missed.
     */
    Properties props(String app) {
        Properties p = new Properties();
        p.setProperty("user", env.user());
        p.setProperty("password", env.password());
        p.setProperty("ApplicationName", app);
        p.setProperty("prepareThreshold", Integer.toString(driver.prepareThreshold()));
        p.setProperty("connectTimeout", "10");
        p.setProperty("loginTimeout", "10");
        p.setProperty("socketTimeout", Long.toString(env.timeout().toSeconds() + 10));
        return p;
    }

    Connection connect() throws SQLException {
        return connect(props(app()));
    }

    /** Opens a connection to pgmux; the runner closes it if the body does not. */
    Connection connect(Properties props) throws SQLException {
        return connect(env.url(env.port()), props);
    }

    /** Opens a connection by a URL of the scenario's own; the runner closes it if the body does not. */
    Connection connect(String url, Properties props) throws SQLException {
        Connection c = DriverManager.getConnection(url, props);
        synchronized (conns) {
            conns.add(c);
        }
        return c;
    }

    /** A fixed pool of daemon threads, shut down with the scenario. */
    ExecutorService threads(int n, String name) {
        ExecutorService pool = Executors.newFixedThreadPool(n, daemon(name));
        synchronized (pools) {
            pools.add(pool);
        }
        return pool;
    }

    /** Closes what the body left open (Terminate), after the body has returned. */
    void closeAll() {
        synchronized (pools) {
            pools.forEach(ExecutorService::shutdownNow);
            pools.clear();
        }
        synchronized (conns) {
            for (Connection c : conns) {
                try {
                    c.close();
                } catch (SQLException e) {
                    // already broken: nothing left to close
                }
            }
            conns.clear();
        }
    }

    /** Cuts every socket while the body may still be using them. */
    void abortAll() {
        synchronized (conns) {
            for (Connection c : conns) {
                try {
                    c.abort(Runnable::run);
                } catch (SQLException e) {
                    // already closed
                }
            }
        }
    }

    /**
     * Runs statements one by one. A multi-statement string would do with the default threshold, but with
     * prepareThreshold=-1 pgjdbc parses every part before running any, so a CREATE and the INSERT into its
     * table cannot share one string.
     */
    static void exec(java.sql.Statement st, String... sqls) throws SQLException {
        for (String sql : sqls) {
            st.execute(sql);
        }
    }

    static ThreadFactory daemon(String prefix) {
        AtomicInteger n = new AtomicInteger();
        return task -> {
            Thread t = new Thread(task, prefix + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }
}
