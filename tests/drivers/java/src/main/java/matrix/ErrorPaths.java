package matrix;

import static matrix.Failures.check;

import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * S5: the client recovers from errors (a failed statement in a transaction, an error in the middle of a
 * batch, a cached plan whose result type changed). S5b (a named Parse that fails) is not expressible:
 * pgjdbc chooses its statement names itself.
 */
final class ErrorPaths {
    private ErrorPaths() {}

    /** 1/0 inside a transaction, rollback, then the next transaction works. */
    static String s5aDivisionByZero(Run r) throws Exception {
        try (Connection conn = r.connect(); PreparedStatement ps = conn.prepareStatement("SELECT 1 / ?::int")) {
            conn.setAutoCommit(false);
            ps.setInt(1, 0);
            SQLException got = null;
            try {
                ps.executeQuery().close();
            } catch (SQLException e) {
                got = e;
            }
            Failures.expectState(got, "22012", "1/0 in a transaction");
            conn.rollback();
            selectInTx(conn, 7);
        }
        return "22012, rollback, next transaction works";
    }

    static void selectInTx(Connection conn, int v) throws Exception {
        boolean auto = conn.getAutoCommit();
        conn.setAutoCommit(false);
        try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int")) {
            ps.setInt(1, v);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next() && rs.getInt(1) == v, "SELECT " + v + " in the next transaction");
            }
            conn.commit();
        } catch (SQLException e) {
            throw new Failures.Check("next transaction", e);
        } finally {
            conn.setAutoCommit(auto);
        }
    }

    /**
     * executeBatch of 1,000 inserts whose 500th violates the primary key, autocommit off: a
     * BatchUpdateException with 23505, rollback leaves nothing, and the next transaction works.
     */
    static String s5cBatchError(Run r) throws Exception {
        String tbl = r.table("s5c");
        try (Connection conn = r.connect(); Statement st = conn.createStatement()) {
            Run.exec(st, "DROP TABLE IF EXISTS " + tbl, "CREATE TABLE " + tbl + " (id int PRIMARY KEY)");
            try {
                conn.setAutoCommit(false);
                BatchUpdateException got = null;
                try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + tbl + " (id) VALUES (?)")) {
                    for (int i = 1; i <= 1000; i++) {
                        ps.setInt(1, i == 500 ? 1 : i);
                        ps.addBatch();
                    }
                    try {
                        ps.executeBatch();
                    } catch (BatchUpdateException e) {
                        got = e;
                    }
                }
                Failures.expectState(got, "23505", "batch with a duplicate key at row 500");
                conn.rollback();
                conn.setAutoCommit(true);
                try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + tbl)) {
                    check(rs.next() && rs.getLong(1) == 0, "rolled-back batch left " + rs.getLong(1) + " rows");
                }
                selectInTx(conn, 4);
            } finally {
                conn.setAutoCommit(true);
                st.execute("DROP TABLE IF EXISTS " + tbl);
            }
        }
        return "23505 at row 500 of 1000, rollback left 0 rows, next transaction works";
    }

    /**
     * A PreparedStatement run six times (so it is server-prepared), then ALTER TABLE changes its result
     * type: pgjdbc may see {@code cached plan must not change result type} (0A000) once and must recover
     * on the next try.
     */
    static String s5dCachedPlan(Run r) throws Exception {
        String tbl = r.table("s5d");
        try (Connection conn = r.connect(); Statement st = conn.createStatement()) {
            Run.exec(st, "DROP TABLE IF EXISTS " + tbl, "CREATE TABLE " + tbl + " (id int, v text)",
                    "INSERT INTO " + tbl + " VALUES (1, 'one')");
            try (PreparedStatement ps = conn.prepareStatement("SELECT * FROM " + tbl + " WHERE id = ?")) {
                ps.setInt(1, 1);
                for (int i = 0; i < 6; i++) {
                    check(columns(ps) == 2, "before ALTER: not 2 columns");
                }
                st.execute("ALTER TABLE " + tbl + " ADD COLUMN w int DEFAULT 7");
                String seen = "no error";
                int n;
                try {
                    n = columns(ps);
                } catch (SQLException e) {
                    if (!"0A000".equals(e.getSQLState())) {
                        throw new Failures.Check("first query after ALTER", e);
                    }
                    seen = "0A000 once";
                    n = columns(ps);
                }
                check(n == 3, "after ALTER (" + seen + "): " + n + " columns");
                selectInTx(conn, 6);
                return "after ALTER TABLE: " + seen + ", then 3 columns; next transaction works";
            } finally {
                st.execute("DROP TABLE IF EXISTS " + tbl);
            }
        }
    }

    private static int columns(PreparedStatement ps) throws SQLException {
        try (ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) {
                throw new SQLException("no row");
            }
            return rs.getMetaData().getColumnCount();
        }
    }
}
