package matrix;

import static matrix.Failures.check;

import java.io.Reader;
import java.io.StringReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyIn;
import org.postgresql.copy.CopyManager;

/**
 * S6 through CopyManager: 100,000 rows in, the same out in order, then a COPY IN the server rejects (bad
 * row) and one the client abandons (CopyFail); the connection must work after each.
 */
final class Copy {
    private Copy() {}

    static final int ROWS = 100_000;

    static String s6Copy(Run r) throws Exception {
        String tbl = r.table("s6");
        try (Connection conn = r.connect(); Statement st = conn.createStatement()) {
            Run.exec(st, "DROP TABLE IF EXISTS " + tbl, "CREATE TABLE " + tbl + " (id int, v text)");
            try {
                CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
                long in = copy.copyIn("COPY " + tbl + " (id, v) FROM STDIN", new RowsReader(ROWS));
                check(in == ROWS, "COPY FROM STDIN reported " + in + " rows");
                count(st, tbl, "after COPY IN");

                LineChecker out = new LineChecker();
                long copied = copy.copyOut("COPY (SELECT id, v FROM " + tbl + " ORDER BY id) TO STDOUT", out);
                check(copied == ROWS, "COPY TO STDOUT reported " + copied + " rows");
                out.finish();

                SQLException bad = null;
                try {
                    copy.copyIn("COPY " + tbl + " (id, v) FROM STDIN", new StringReader("1\tfine\nnot-a-number\tbad\n"));
                } catch (SQLException e) {
                    bad = e;
                }
                Failures.expectState(bad, "22P02", "COPY IN with a bad row");
                count(st, tbl, "after the bad row");

                CopyIn abandoned = copy.copyIn("COPY " + tbl + " (id, v) FROM STDIN");
                byte[] line = "1\tdoomed\n".getBytes(StandardCharsets.UTF_8);
                for (int i = 0; i < 500; i++) {
                    abandoned.writeToCopy(line, 0, line.length);
                }
                SQLException failed = null;
                try {
                    abandoned.cancelCopy();
                } catch (SQLException e) {
                    failed = e; // pgjdbc reports the server's answer to CopyFail
                }
                check(!abandoned.isActive(), "COPY still active after cancelCopy()");
                check(failed == null || "57014".equals(failed.getSQLState()),
                        "cancelCopy(): " + (failed == null ? "" : Failures.describe(failed)));
                count(st, tbl, "after CopyFail");
            } finally {
                st.execute("DROP TABLE IF EXISTS " + tbl);
            }
        }
        return ROWS + " rows in, " + ROWS + " out in order; bad row 22P02 and CopyFail both left the connection usable";
    }

    private static void count(Statement st, String tbl, String when) throws Exception {
        try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + tbl)) {
            check(rs.next() && rs.getLong(1) == ROWS, tbl + " holds " + rs.getLong(1) + " rows " + when + ", want " + ROWS);
        } catch (SQLException e) {
            throw new Failures.Check("count " + when, e);
        }
    }

    /** Produces "id\trow id\n" lines without holding them all in memory. */
    static final class RowsReader extends Reader {
        private final int rows;
        private int next = 1;
        private String pending = "";
        private int pos;

        RowsReader(int rows) {
            this.rows = rows;
        }

        @Override
        public int read(char[] buf, int off, int len) {
            if (pos == pending.length()) {
                if (next > rows) {
                    return -1;
                }
                pending = next + "\trow " + next + "\n";
                next++;
                pos = 0;
            }
            int n = Math.min(len, pending.length() - pos);
            pending.getChars(pos, pos + n, buf, off);
            pos += n;
            return n;
        }

        @Override
        public void close() {}
    }

    /** Checks COPY text output line by line: rows 1..ROWS in order. */
    static final class LineChecker extends Writer {
        private final StringBuilder line = new StringBuilder();
        private int lines;
        private String problem;

        @Override
        public void write(char[] buf, int off, int len) {
            for (int i = off; i < off + len; i++) {
                if (buf[i] != '\n') {
                    line.append(buf[i]);
                    continue;
                }
                lines++;
                String want = lines + "\trow " + lines;
                if (problem == null && !want.contentEquals(line)) {
                    problem = "COPY line " + lines + " is \"" + line + "\", want \"" + want + "\"";
                }
                line.setLength(0);
            }
        }

        void finish() throws Failures.Check {
            check(problem == null, String.valueOf(problem));
            check(lines == ROWS, "COPY TO STDOUT gave " + lines + " lines");
        }

        @Override
        public void flush() {}

        @Override
        public void close() {}
    }
}
