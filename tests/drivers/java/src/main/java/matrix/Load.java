package matrix;

import static matrix.Failures.check;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * S4 (prepared churn under load), S7 (a million rows through fetchSize while others work) and S8 (cancel
 * while others work), with the background workers the last two share.
 */
final class Load {
    private Load() {}

    /** The five SQL texts every S4 client shares; each client adds one of its own. */
    static final String SELECT_V = "SELECT v FROM t WHERE id = ?";
    static final String UPDATE_F = "UPDATE t SET f = f + 1 WHERE id = ?";
    static final String AUDIT = "INSERT INTO audit(client, pid, n) VALUES (?, pg_backend_pid(), ?)";
    static final String COUNT_NEAR = "SELECT count(*) FROM t WHERE id BETWEEN ? AND ? + 9";
    static final String DOUBLE = "SELECT ?::int8 * 2";

    /** Waits for a client's result within the scenario's deadline and rethrows what it threw. */
    static <T> T await(Run r, Future<T> f) throws Exception {
        try {
            return f.get(Math.max(r.remaining().toMillis(), 1), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception ex) {
                throw ex;
            }
            throw e;
        } catch (TimeoutException e) {
            throw new Failures.Check("deadline passed (MATRIX_TIMEOUT_S) waiting for a client");
        }
    }

    /**
     * MATRIX_CLIENTS workers, one connection each, run MATRIX_TXNS transactions with the same six
     * PreparedStatements, so pgjdbc's threshold names them (S_n) after five runs. Every audit row must land,
     * on at least two backends, and pgmux must never open more than MATRIX_POOL_MAX of them.
     */
    static String s4PreparedChurn(Run r) throws Exception {
        Env e = r.env;
        String prefix = r.driver.name() + ":";
        r.oracle.exec("DELETE FROM audit WHERE left(client, length(?)) = ?", prefix, prefix);
        ExecutorService pool = r.threads(e.clients(), "s4");
        long start = System.nanoTime();
        List<Future<Void>> clients = new ArrayList<>();
        Throwable first = null;
        int failed = 0;
        String bound;
        try (Oracle.Sampler sampler = r.oracle.sampleBackends()) {
            for (int c = 0; c < e.clients(); c++) {
                final int client = c;
                clients.add(pool.submit(() -> {
                    churn(r, client, prefix);
                    return null;
                }));
            }
            for (Future<Void> f : clients) {
                try {
                    await(r, f);
                } catch (Exception ex) {
                    failed++;
                    first = first == null ? ex : first;
                }
            }
            bound = sampler.finish();
        }
        double secs = (System.nanoTime() - start) / 1e9;
        if (first != null) {
            throw new Failures.Check(failed + " of " + e.clients() + " clients failed; first", first);
        }
        long[] audit = r.oracle.row("SELECT count(*), count(DISTINCT (client, n)), count(DISTINCT pid) FROM audit "
                + "WHERE left(client, length(?)) = ?", prefix, prefix);
        long want = (long) e.clients() * e.txns();
        check(audit[0] == want && audit[1] == want,
                "audit holds " + audit[0] + " rows (" + audit[1] + " distinct), want " + want);
        check(audit[2] >= 2, "all audit rows came from " + audit[2] + " backend pid(s), want ≥ 2");
        return String.format("%d txns in %.1fs, 0 errors, %d distinct pids, %s", want, secs, audit[2], bound);
    }

    private static void churn(Run r, int c, String prefix) throws Exception {
        String client = String.format("%s%02d", prefix, c);
        try (Connection conn = r.connect();
                PreparedStatement sel = conn.prepareStatement(SELECT_V);
                PreparedStatement upd = conn.prepareStatement(UPDATE_F);
                PreparedStatement aud = conn.prepareStatement(AUDIT);
                PreparedStatement own = conn.prepareStatement("SELECT ?::int + " + c + " AS n");
                PreparedStatement cnt = conn.prepareStatement(COUNT_NEAR);
                PreparedStatement dbl = conn.prepareStatement(DOUBLE)) {
            for (int n = 0; n < r.env.txns(); n++) {
                r.checkTime();
                int id = (c * r.env.txns() + n) % 1000 + 1;
                try {
                    conn.setAutoCommit(false);
                    sel.setInt(1, id);
                    try (ResultSet rs = sel.executeQuery()) {
                        check(rs.next() && ("value " + id).equals(rs.getString(1)), "row " + id + " wrong");
                    }
                    upd.setInt(1, id);
                    check(upd.executeUpdate() == 1, "UPDATE touched no row");
                    aud.setString(1, client);
                    aud.setInt(2, n);
                    aud.executeUpdate();
                    own.setInt(1, n);
                    try (ResultSet rs = own.executeQuery()) {
                        check(rs.next() && rs.getInt(1) == n + c, "own statement returned the wrong value");
                    }
                    conn.commit();
                    conn.setAutoCommit(true);
                    if (n % 2 == 0) {
                        int lo = id % 990 + 1;
                        cnt.setInt(1, lo);
                        cnt.setInt(2, lo);
                        try (ResultSet rs = cnt.executeQuery()) {
                            check(rs.next() && rs.getInt(1) == 10, "autocommit count is not 10");
                        }
                    } else {
                        dbl.setLong(1, n);
                        try (ResultSet rs = dbl.executeQuery()) {
                            check(rs.next() && rs.getLong(1) == 2L * n, "autocommit double is wrong");
                        }
                    }
                } catch (SQLException | Failures.Check ex) {
                    throw new Failures.Check("client " + c + " txn " + n, ex);
                }
            }
        }
    }

    /** Short S4-style transactions in the background, each worker on its own connection, until finished. */
    static final class Workers {
        private final AtomicLongArray counts;
        private final List<Future<?>> futures = new ArrayList<>();
        private final List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        private final List<Long> latencies = Collections.synchronizedList(new ArrayList<>());
        private volatile boolean stop;
        private volatile boolean saw57014;

        Workers(Run r, int n) {
            counts = new AtomicLongArray(n);
            ExecutorService pool = r.threads(n, "worker");
            for (int i = 0; i < n; i++) {
                final int w = i;
                futures.add(pool.submit(() -> loop(r, w)));
            }
        }

        private void loop(Run r, int w) {
            try (Connection conn = r.connect();
                    PreparedStatement sel = conn.prepareStatement(SELECT_V);
                    PreparedStatement upd = conn.prepareStatement(UPDATE_F)) {
                conn.setAutoCommit(false);
                for (int k = 0; !stop && !r.expired(); k++) {
                    int id = (w * 7919 + k) % 1000 + 1;
                    long t0 = System.nanoTime();
                    sel.setInt(1, id);
                    try (ResultSet rs = sel.executeQuery()) {
                        rs.next();
                    }
                    upd.setInt(1, id);
                    upd.executeUpdate();
                    conn.commit();
                    latencies.add(System.nanoTime() - t0);
                    counts.incrementAndGet(w);
                    Oracle.sleep(1); // leave the two cores some air
                }
            } catch (SQLException e) {
                if (!stop) {
                    saw57014 |= "57014".equals(e.getSQLState());
                    errors.add(new Failures.Check("worker " + w, e));
                }
            }
        }

        /**
         * Waits until every worker has committed once, so that a worker still logging in does not count as
         * one that stalled. A worker's failure is left for finish() to report.
         */
        void awaitFirstCommit(Run r) throws Failures.Check {
            while (errors.isEmpty()) {
                boolean ready = true;
                for (int i = 0; i < counts.length(); i++) {
                    ready &= counts.get(i) > 0;
                }
                if (ready) {
                    return;
                }
                r.checkTime();
                Oracle.sleep(10);
            }
        }

        long[] snapshot() {
            long[] out = new long[counts.length()];
            for (int i = 0; i < out.length; i++) {
                out[i] = counts.get(i);
            }
            return out;
        }

        long p99Millis() {
            List<Long> copy;
            synchronized (latencies) {
                copy = new ArrayList<>(latencies);
            }
            if (copy.isEmpty()) {
                return 0;
            }
            Collections.sort(copy);
            return copy.get((int) (0.99 * (copy.size() - 1))) / 1_000_000;
        }

        /** Stops the workers; throws the first error any of them saw. */
        void finish() throws Exception {
            stop = true;
            for (Future<?> f : futures) {
                try {
                    f.get(10, TimeUnit.SECONDS);
                } catch (TimeoutException e) {
                    throw new Failures.Check("a background worker did not stop within 10 s");
                }
            }
            if (!errors.isEmpty()) {
                String what = saw57014 ? "a bystander got SQLSTATE 57014 (" + errors.size() + " worker(s) failed)"
                        : errors.size() + " background worker(s) failed";
                throw new Failures.Check(what, errors.get(0));
            }
        }
    }

    /**
     * A million rows through {@code setFetchSize(1000)} with autocommit off (a portal read with
     * Execute(1000) across round trips) while four other clients keep committing.
     */
    static String s7FetchSize(Run r) throws Exception {
        final int others = 4;
        return withWorkers(r, others, w -> {
            long rows = 0;
            long sum = 0;
            long[] before;
            long[] after;
            long t0;
            try (Connection conn = r.connect()) {
                conn.setAutoCommit(false);
                w.awaitFirstCommit(r);
                before = w.snapshot();
                t0 = System.nanoTime();
                try (PreparedStatement ps = conn.prepareStatement("SELECT id, v FROM big")) {
                    ps.setFetchSize(1000);
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            if ((rows & 0xffff) == 0) {
                                r.checkTime();
                            }
                            rows++;
                            sum += rs.getLong(1);
                            if (rs.getString(2).length() != 32) {
                                throw new Failures.Check("row " + rs.getLong(1) + ": v = " + rs.getString(2));
                            }
                        }
                    }
                }
                conn.commit();
                after = w.snapshot();
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            check(rows == 1_000_000 && sum == 500_000_500_000L,
                    "fetchSize gave " + rows + " rows summing to " + sum + ", want 1000000 and 500000500000");
            long total = 0;
            for (int i = 0; i < others; i++) {
                check(after[i] > before[i],
                        String.format("background worker %d committed nothing during the %.1fs stream", i, secs));
                total += after[i] - before[i];
            }
            return String.format("1000000 rows with fetchSize 1000 (%.1fs); %d others committed %d txns meanwhile, "
                    + "p99 %d ms", secs, others, total, w.p99Millis());
        });
    }

    /** A scenario body that runs while background workers commit. */
    @FunctionalInterface
    interface WithWorkers<T> {
        T run(Workers w) throws Exception;
    }

    /** Runs body while n workers commit, then stops them; a worker's error fails the scenario too. */
    static <T> T withWorkers(Run r, int n, WithWorkers<T> body) throws Exception {
        Workers w = new Workers(r, n);
        T out;
        try {
            out = body.run(w);
        } catch (Exception e) {
            try {
                w.finish();
            } catch (Exception workerError) {
                e.addSuppressed(workerError);
            }
            throw e;
        }
        w.finish();
        return out;
    }

    /**
     * {@code SELECT pg_sleep(30)} cancelled while four others work: by {@code Statement.cancel()} from another
     * thread after 200 ms, then by {@code setQueryTimeout(1)}. Each must end in 57014 within 2 s of the
     * cancel, on a connection that still works; nobody else may see 57014.
     */
    static String s8Cancel(Run r) throws Exception {
        ScheduledExecutorService timer = new ScheduledThreadPoolExecutor(1, Run.daemon("cancel"));
        try {
            return withWorkers(r, 4, w -> cancelTwice(r, timer));
        } finally {
            timer.shutdownNow();
        }
    }

    private static String cancelTwice(Run r, ScheduledExecutorService timer) throws Exception {
        try (Connection conn = r.connect(); PreparedStatement ps = conn.prepareStatement("SELECT pg_sleep(?)")) {
            AtomicLong cancelledAt = new AtomicLong();
            ps.setDouble(1, 30);
            // Cancel once the query has run 200 ms and the oracle sees it running: on a loaded machine a
            // plain timer could cancel before the query reached the server, and then it would sleep 30 s.
            timer.schedule(() -> {
                r.oracle.waitActive("SELECT pg_sleep($1)", Duration.ofSeconds(5));
                cancelledAt.set(System.nanoTime());
                try {
                    ps.cancel();
                } catch (SQLException e) {
                    // the execute below then fails on its own and says how
                }
            }, 200, TimeUnit.MILLISECONDS);
            SQLException got = null;
            try {
                ps.execute();
            } catch (SQLException e) {
                got = e;
            }
            long at = cancelledAt.get();
            if (at == 0) {
                Failures.expectState(got, "57014", "pg_sleep(30) ended before Statement.cancel()");
            }
            Duration took = Duration.ofNanos(System.nanoTime() - at);
            Failures.expectState(got, "57014", "pg_sleep(30) after Statement.cancel()");
            check(took.toMillis() < 2000, "57014 arrived " + took.toMillis() + " ms after cancel(), want < 2 s");
            selectOne(conn, "after cancel()");

            ps.setQueryTimeout(1);
            long t0 = System.nanoTime();
            got = null;
            try {
                ps.execute();
            } catch (SQLException e) {
                got = e;
            }
            Duration timeout = Duration.ofNanos(System.nanoTime() - t0);
            Failures.expectState(got, "57014", "pg_sleep(30) with setQueryTimeout(1)");
            check(timeout.toMillis() < 3000, "setQueryTimeout(1) took " + timeout.toMillis() + " ms, want < 3 s");
            selectOne(conn, "after setQueryTimeout");
            return "cancel(): 57014 after " + took.toMillis() + " ms; setQueryTimeout(1): 57014 after "
                    + timeout.toMillis() + " ms; connection works after both; no bystander saw 57014";
        }
    }

    static void selectOne(Connection conn, String when) throws Exception {
        try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int")) {
            ps.setInt(1, 1);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next() && rs.getInt(1) == 1, "SELECT 1 " + when);
            }
        } catch (SQLException e) {
            throw new Failures.Check("connection " + when, e);
        }
    }
}
