package matrix;

import static matrix.Failures.check;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;

/**
 * S12 (statements dropped and used again), S13 (statement names shared between connections) and S15
 * (executeBatch, pgjdbc's pipeline). S14 is not expressible: pgjdbc always binds the unnamed statement in
 * the Sync unit that parsed it.
 */
final class Statements {
    private Statements() {}

    /**
     * A server-prepared statement, then {@code DEALLOCATE ALL} and {@code DISCARD ALL} (pgjdbc watches both
     * command tags and prepares again), then protocol Close (a PreparedStatement closed with the statement
     * cache off) and the same SQL prepared anew. No "does not exist" anywhere.
     */
    static String s12Deallocate(Run r) throws Exception {
        try (Connection conn = r.connect();
                Statement st = conn.createStatement();
                PreparedStatement ps = conn.prepareStatement("SELECT ?::int * 3")) {
            use(ps, "before DEALLOCATE ALL");
            st.execute("DEALLOCATE ALL");
            use(ps, "after DEALLOCATE ALL");
            st.execute("DISCARD ALL");
            use(ps, "after DISCARD ALL");
        }
        Properties noCache = r.props(r.app());
        noCache.setProperty("preparedStatementCacheQueries", "0");
        try (Connection conn = r.connect(noCache)) {
            for (int pass = 1; pass <= 2; pass++) {
                try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int * 3")) {
                    use(ps, "after Close, pass " + pass);
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int * 3")) {
                use(ps, "after the last Close");
            }
        }
        return "re-prepared after DEALLOCATE ALL, DISCARD ALL and Close; 6 executions each";
    }

    private static void use(PreparedStatement ps, String when) throws Exception {
        for (int i = 0; i < 6; i++) {
            ps.setInt(1, i);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next() && rs.getInt(1) == 3 * i, when + ": wrong result");
            } catch (SQLException e) {
                throw new Failures.Check(when + ", execution " + (i + 1), e);
            }
        }
    }

    /**
     * (1) Two connections each name their first server-prepared statement S_1, with different SQL and
     * result shapes, and use them in turn; (2) four connections run the same SQL at once, S_1 everywhere.
     * Each client must get its own statement's result.
     */
    static String s13NameCollisions(Run r) throws Exception {
        final int rounds = 20;
        try (Connection a = r.connect();
                Connection b = r.connect();
                PreparedStatement pa = a.prepareStatement("SELECT 'A:' || ?");
                PreparedStatement pb = b.prepareStatement("SELECT ?::int + 1000, 'B'")) {
            for (int i = 0; i < rounds; i++) {
                pa.setString(1, Integer.toString(i));
                try (ResultSet rs = pa.executeQuery()) {
                    check(rs.next() && ("A:" + i).equals(rs.getString(1)), "client A round " + i + ": " + rs.getString(1));
                } catch (SQLException e) {
                    throw new Failures.Check("client A round " + i, e);
                }
                pb.setInt(1, i);
                try (ResultSet rs = pb.executeQuery()) {
                    check(rs.next() && rs.getInt(1) == 1000 + i && "B".equals(rs.getString(2)), "client B round " + i);
                } catch (SQLException e) {
                    throw new Failures.Check("client B round " + i, e);
                }
            }
        }

        ExecutorService pool = r.threads(4, "s13");
        List<Future<Void>> clients = new ArrayList<>();
        for (int c = 0; c < 4; c++) {
            final int client = c;
            clients.add(pool.submit(() -> {
                try (Connection conn = r.connect();
                        PreparedStatement ps = conn.prepareStatement("SELECT ?::int * 10 + ?::int")) {
                    for (int i = 0; i < rounds; i++) {
                        ps.setInt(1, i);
                        ps.setInt(2, client);
                        try (ResultSet rs = ps.executeQuery()) {
                            check(rs.next() && rs.getInt(1) == i * 10 + client, "shared-SQL client " + client + " round " + i);
                        } catch (SQLException e) {
                            throw new Failures.Check("shared-SQL client " + client + " round " + i, e);
                        }
                    }
                }
                return null;
            }));
        }
        for (Future<Void> f : clients) {
            Load.await(r, f);
        }
        return "same name, different SQL: " + rounds + " rounds each right; same SQL on 4 connections: right";
    }

    /**
     * executeBatch of 10,000 inserts in autocommit: pgjdbc pipelines Bind/Execute and puts a Sync in
     * whenever the replies it expects might fill its buffer, so the batch spans several Sync units.
     */
    static String s15Batch(Run r) throws Exception {
        final int rows = 10_000;
        String tbl = r.table("s15");
        try (Connection conn = r.connect(); Statement st = conn.createStatement()) {
            Run.exec(st, "DROP TABLE IF EXISTS " + tbl, "CREATE TABLE " + tbl + " (id int, v text)");
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + tbl + " (id, v) VALUES (?, ?)")) {
                for (int i = 1; i <= rows; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "row " + i);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                check(counts.length == rows, "executeBatch returned " + counts.length + " counts");
                for (int i = 0; i < counts.length; i++) {
                    check(counts[i] == 1 || counts[i] == Statement.SUCCESS_NO_INFO, "row " + (i + 1) + " count " + counts[i]);
                }
                try (ResultSet rs = st.executeQuery("SELECT count(*), sum(id) FROM " + tbl)) {
                    check(rs.next() && rs.getLong(1) == rows && rs.getLong(2) == (long) rows * (rows + 1) / 2,
                            tbl + " holds " + rs.getLong(1) + " rows summing to " + rs.getLong(2));
                }
            } finally {
                st.execute("DROP TABLE IF EXISTS " + tbl);
            }
        }
        return "executeBatch of " + rows + " rows: every count 1, all rows there";
    }
}
