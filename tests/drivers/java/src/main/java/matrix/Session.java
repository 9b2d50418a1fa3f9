package matrix;

import static matrix.Failures.check;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/** S9 (notices and notifications) and S10 (SET LOCAL, and a session SET that must not leak to others). */
final class Session {
    private Session() {}

    /**
     * Two clients raise notices at the same time and each must get exactly its own, as SQLWarnings on the
     * statement; a NOTIFY sent through pgmux must reach a LISTEN on a direct connection.
     */
    static String s9Notices(Run r) throws Exception {
        final int rounds = 20;
        ExecutorService pool = r.threads(2, "s9");
        List<Future<Void>> clients = new ArrayList<>();
        for (String who : new String[] {"A", "B"}) {
            clients.add(pool.submit(() -> {
                try (Connection conn = r.connect(); PreparedStatement ps = conn.prepareStatement("SELECT notice(?)")) {
                    for (int i = 0; i < rounds; i++) {
                        ps.setString(1, who + "-" + i);
                        ps.executeQuery().close();
                        SQLWarning w = ps.getWarnings();
                        String want = "hello " + who + "-" + i;
                        check(w != null && want.equals(w.getMessage()) && w.getNextWarning() == null,
                                "client " + who + " round " + i + ": warnings " + chain(w) + ", want [" + want + "]");
                    }
                }
                return null;
            }));
        }
        for (Future<Void> f : clients) {
            Load.await(r, f);
        }

        String channel = r.table("s9");
        String[] payloads = {"via pg_notify " + System.nanoTime(), "via NOTIFY"};
        try (Connection listener = r.oracle.open(); Statement ls = listener.createStatement()) {
            ls.execute("LISTEN " + channel);
            try (Connection conn = r.connect();
                    PreparedStatement ps = conn.prepareStatement("SELECT pg_notify(?, ?)");
                    Statement st = conn.createStatement()) {
                ps.setString(1, channel);
                ps.setString(2, payloads[0]);
                ps.executeQuery().close();
                st.execute("NOTIFY " + channel + ", '" + payloads[1] + "'");
            }
            List<String> got = new ArrayList<>();
            long end = System.nanoTime() + 5_000_000_000L;
            while (got.size() < payloads.length && System.nanoTime() < end) {
                PGNotification[] ns = listener.unwrap(PGConnection.class).getNotifications(500);
                if (ns != null) {
                    for (PGNotification n : ns) {
                        check(channel.equals(n.getName()), "notification on channel " + n.getName());
                        got.add(n.getParameter());
                    }
                }
            }
            check(got.equals(List.of(payloads)), "direct listener got " + got + ", want " + List.of(payloads));
        }
        return "2 clients × " + rounds + " notices, each got its own; NOTIFY reached a direct LISTEN";
    }

    private static List<String> chain(SQLWarning w) {
        List<String> out = new ArrayList<>();
        for (; w != null; w = w.getNextWarning()) {
            out.add(w.getMessage());
        }
        return out;
    }

    /**
     * SET LOCAL holds for its transaction only; a session SET of search_path stays with the client that made
     * it and never shows up at another client.
     */
    static String s10SessionState(Run r) throws Exception {
        String detail;
        try {
            detail = setLocalAndLeakProbe(r);
        } catch (Exception e) {
            try {
                scrubSearchPath(r);
            } catch (Exception scrub) {
                e.addSuppressed(scrub);
            }
            throw e;
        }
        scrubSearchPath(r);
        return detail;
    }

    private static String setLocalAndLeakProbe(Run r) throws Exception {
        try (Connection conn = r.connect();
                Statement st = conn.createStatement();
                PreparedStatement sleep = conn.prepareStatement("SELECT pg_sleep(?)")) {
            conn.setAutoCommit(false);
            st.execute("SET LOCAL statement_timeout = '100ms'");
            sleep.setDouble(1, 1.0);
            SQLException got = null;
            try {
                sleep.executeQuery().close();
            } catch (SQLException e) {
                got = e;
            }
            Failures.expectState(got, "57014", "pg_sleep(1) under SET LOCAL statement_timeout = '100ms'");
            conn.rollback();
            try (ResultSet rs = st.executeQuery("SELECT current_setting('statement_timeout')")) {
                check(rs.next() && "0".equals(rs.getString(1)), "statement_timeout is " + rs.getString(1) + " in the next transaction");
            }
            sleep.setDouble(1, 0.2);
            sleep.executeQuery().close();
            conn.commit();
        } catch (SQLException e) {
            throw new Failures.Check("SET LOCAL part", e);
        }

        final int rounds = 20;
        try (Connection a = r.connect(); Connection b = r.connect()) {
            String defaultPath = searchPath(b);
            try (Statement st = a.createStatement()) {
                st.execute("SET search_path = matrix_alt");
            }
            for (int i = 0; i < rounds; i++) {
                String ga = searchPath(a);
                check("matrix_alt".equals(ga), "A round " + i + ": search_path is \"" + ga
                        + "\", want \"matrix_alt\" (session SET of a parameter the server does not report)");
                String gb = searchPath(b);
                check(defaultPath.equals(gb), "B round " + i + ": search_path is \"" + gb + "\", want \""
                        + defaultPath + "\" (session SET of a parameter the server does not report)");
            }
            return "SET LOCAL honoured (57014) and gone next txn; " + rounds + " rounds: A kept matrix_alt, B kept \""
                    + defaultPath + "\"";
        }
    }

    /**
     * Undoes the leak probe's session SET wherever a pooler may have left it, so that later scenarios and
     * suites find their tables. It holds MATRIX_POOL_MAX transactions open at once, which puts each on a
     * different server connection, and resets search_path in each before committing.
     */
    static void scrubSearchPath(Run r) throws Exception {
        int n = r.env.poolMax();
        CyclicBarrier allOpen = new CyclicBarrier(n);
        ExecutorService pool = r.threads(n, "scrub");
        List<Future<Void>> scrubs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            scrubs.add(pool.submit(() -> {
                try (Connection c = r.connect(); Statement st = c.createStatement()) {
                    c.setAutoCommit(false);
                    st.execute("RESET search_path");
                    allOpen.await(10, TimeUnit.SECONDS);
                    c.commit();
                }
                return null;
            }));
        }
        try {
            for (Future<Void> f : scrubs) {
                f.get(15, TimeUnit.SECONDS);
            }
        } catch (ExecutionException | TimeoutException e) {
            throw new Failures.Check("resetting search_path on the pooled servers after the probe",
                    e instanceof ExecutionException ? e.getCause() : e);
        }
    }

    private static String searchPath(Connection c) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT current_setting('search_path')");
                ResultSet rs = ps.executeQuery()) {
            rs.next();
            return rs.getString(1);
        }
    }
}
