package matrix;

import static matrix.Failures.check;

import java.math.BigDecimal;
import java.security.MessageDigest;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import org.postgresql.PGConnection;

/** S1 (start-up and ParameterStatus), S2 (simple query), S3 (parameter types), S11 (binary transfer). */
final class Basics {
    private Basics() {}

    /**
     * Four clients, each with its own application_name, run 100 transactions on whatever servers they get.
     * Two announce the name the default way (a session SET after login, as pgjdbc does unless
     * assumeMinServerVersion ≥ 9.0), two in the start-up packet (assumeMinServerVersion=12). Each must keep
     * its own name, and pgjdbc must have accepted DateStyle, client_encoding and server_version ≥ 12.
     */
    static String s1Startup(Run r) throws Exception {
        final int clients = 4;
        final int txns = 100;
        ExecutorService pool = r.threads(clients, "s1");
        List<Future<String>> results = new ArrayList<>();
        Set<Integer> pids = Collections.synchronizedSet(new HashSet<>());
        for (int c = 0; c < clients; c++) {
            final int client = c;
            results.add(pool.submit(() -> {
                String app = client == 0 ? r.app() : r.app() + "-" + client;
                Properties props = r.props(app);
                if (client % 2 == 1) {
                    props.setProperty("assumeMinServerVersion", "12");
                }
                try (Connection conn = r.connect(props)) {
                    PGConnection pg = conn.unwrap(PGConnection.class);
                    String dateStyle = pg.getParameterStatus("DateStyle");
                    check(dateStyle != null && dateStyle.startsWith("ISO"), "client " + client + ": DateStyle " + dateStyle);
                    check("UTF8".equals(pg.getParameterStatus("client_encoding")),
                            "client " + client + ": client_encoding " + pg.getParameterStatus("client_encoding"));
                    check(app.equals(pg.getParameterStatus("application_name")),
                            "client " + client + ": ParameterStatus application_name = " + pg.getParameterStatus("application_name"));
                    String version = pg.getParameterStatus("server_version");
                    int major = conn.getMetaData().getDatabaseMajorVersion();
                    check(major >= 12, "client " + client + ": server_version " + version + " (major " + major + ")");
                    conn.setAutoCommit(false);
                    try (PreparedStatement ps = conn.prepareStatement(
                            "SELECT current_setting('application_name'), pg_backend_pid()")) {
                        for (int n = 0; n < txns; n++) {
                            r.checkTime();
                            try (ResultSet rs = ps.executeQuery()) {
                                rs.next();
                                check(app.equals(rs.getString(1)),
                                        "client " + client + " txn " + n + ": application_name is " + rs.getString(1));
                                pids.add(rs.getInt(2));
                            } catch (SQLException e) {
                                throw new Failures.Check("client " + client + " txn " + n, e);
                            }
                            conn.commit();
                        }
                    }
                    conn.setAutoCommit(true);
                    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SHOW application_name")) {
                        rs.next();
                        check(app.equals(rs.getString(1)), "client " + client + ": SHOW application_name = " + rs.getString(1));
                    }
                    return version;
                }
            }));
        }
        String version = null;
        for (Future<String> f : results) {
            version = Load.await(r, f);
        }
        return "server_version " + version + ", DateStyle ISO, UTF8 accepted; " + clients + " clients (SET and "
                + "start-up packet) × " + txns + " txns on " + pids.size() + " backend(s) kept their application_name";
    }

    /** A multi-statement query returns both results; an empty query is answered and the connection goes on. */
    static String s2SimpleQuery(Run r) throws Exception {
        try (Connection conn = r.connect(); Statement st = conn.createStatement()) {
            check(st.execute("SELECT 1; SELECT 2"), "SELECT 1; SELECT 2: no result set");
            try (ResultSet rs = st.getResultSet()) {
                check(rs.next() && rs.getInt(1) == 1, "first result is not 1");
            }
            check(st.getMoreResults(), "SELECT 1; SELECT 2: no second result");
            try (ResultSet rs = st.getResultSet()) {
                check(rs.next() && rs.getInt(1) == 2, "second result is not 2");
            }
            check(!st.getMoreResults() && st.getUpdateCount() == -1, "SELECT 1; SELECT 2: more than two results");
            check(!st.execute(""), "empty query returned a result set");
            try (ResultSet rs = st.executeQuery("SELECT 3")) {
                check(rs.next() && rs.getInt(1) == 3, "query after the empty query");
            }
        }
        return "2 results in order; empty query answered; connection goes on";
    }

    /**
     * Ten types round-trip through a PreparedStatement run six times, so the default threshold's switch to
     * a named statement happens in the middle; a fixture row reads back as setup.sql wrote it.
     */
    static String s3Types(Run r) throws Exception {
        byte[] blob = new byte[256];
        for (int i = 0; i < blob.length; i++) {
            blob[i] = (byte) i;
        }
        BigDecimal num = new BigDecimal("12345678901234567890.123456789");
        String text = "héllo wörld ☃ 'q' \\ \"";
        OffsetDateTime ts = OffsetDateTime.of(2026, 3, 4, 5, 6, 7, 123456000, ZoneOffset.UTC);
        UUID uuid = UUID.fromString("deadbeef-0102-0304-0506-0708090a0b0c");
        String json = "{\"k\": [1, 2.5, \"x\"], \"nested\": {\"ok\": true}}";
        try (Connection conn = r.connect();
                PreparedStatement ps = conn.prepareStatement("SELECT ?::int4, ?::int8, ?::numeric, ?::text, ?::bytea, "
                        + "?::bool, ?::timestamptz, ?::uuid, ?::jsonb, ?::int4[]")) {
            Array arr = conn.createArrayOf("int4", new Integer[] {1, -2, 3});
            for (int run = 1; run <= 6; run++) {
                ps.setInt(1, Integer.MAX_VALUE);
                ps.setLong(2, Long.MIN_VALUE);
                ps.setBigDecimal(3, num);
                ps.setString(4, text);
                ps.setBytes(5, blob);
                ps.setBoolean(6, true);
                ps.setObject(7, ts);
                ps.setObject(8, uuid);
                ps.setString(9, json);
                ps.setArray(10, arr);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "no row");
                    String at = " (execution " + run + ")";
                    check(rs.getInt(1) == Integer.MAX_VALUE, "int4 came back as " + rs.getInt(1) + at);
                    check(rs.getLong(2) == Long.MIN_VALUE, "int8 came back as " + rs.getLong(2) + at);
                    check(num.equals(rs.getBigDecimal(3)), "numeric came back as " + rs.getBigDecimal(3) + at);
                    check(text.equals(rs.getString(4)), "text came back as " + rs.getString(4) + at);
                    check(Arrays.equals(blob, rs.getBytes(5)), "bytea differs" + at);
                    check(rs.getBoolean(6), "bool came back false" + at);
                    check(ts.isEqual(rs.getObject(7, OffsetDateTime.class)), "timestamptz came back as " + rs.getObject(7) + at);
                    check(uuid.equals(rs.getObject(8)), "uuid came back as " + rs.getObject(8) + at);
                    check(json.equals(rs.getString(9)), "jsonb came back as " + rs.getString(9) + at);
                    check(Arrays.equals(new Integer[] {1, -2, 3}, (Object[]) rs.getArray(10).getArray()),
                            "int[] came back as " + rs.getString(10) + at);
                }
            }
            try (PreparedStatement row = conn.prepareStatement("SELECT v, b, u, a FROM t WHERE id = ?")) {
                row.setInt(1, 42);
                try (ResultSet rs = row.executeQuery()) {
                    check(rs.next(), "fixture row 42 missing");
                    byte[] md5 = MessageDigest.getInstance("MD5").digest("42".getBytes("UTF-8"));
                    check("value 42".equals(rs.getString(1)), "fixture v = " + rs.getString(1));
                    check(Arrays.equals(md5, rs.getBytes(2)), "fixture b differs");
                    check(rs.getObject(3).toString().replace("-", "").equals(hex(md5)), "fixture u = " + rs.getObject(3));
                    check(Arrays.equals(new Integer[] {42, 43}, (Object[]) rs.getArray(4).getArray()), "fixture a differs");
                }
            }
        }
        return "10 types round-trip equal over 6 executions; fixture row matches";
    }

    /**
     * Binary transfer (pgjdbc's default binaryTransfer=true, used once a statement is server-prepared):
     * arrays with NULLs, -0/NaN/Inf floats, bytea and NULL, over six executions so the default threshold
     * switches format in the middle.
     */
    static String s11Binary(Run r) throws Exception {
        Integer[] ints = {1, null, 3};
        String[] texts = {"ünï ☃", null, ""};
        Double[] floats = {-0.0, Double.NaN, Double.POSITIVE_INFINITY, Double.MIN_VALUE, Math.PI};
        byte[] blob = {0, 1, 2, (byte) 0xfe, (byte) 0xff, 0, '\\', 'x'};
        try (Connection conn = r.connect();
                PreparedStatement ps = conn.prepareStatement(
                        "SELECT ?::int4[], ?::text[], ?::float8[], ?::bytea, ?::int8, ?::int8, ?::float8")) {
            for (int run = 1; run <= 6; run++) {
                String at = " (execution " + run + ")";
                ps.setArray(1, conn.createArrayOf("int4", ints));
                ps.setArray(2, conn.createArrayOf("text", texts));
                ps.setArray(3, conn.createArrayOf("float8", floats));
                ps.setBytes(4, blob);
                ps.setNull(5, Types.BIGINT);
                ps.setLong(6, Long.MAX_VALUE);
                ps.setDouble(7, -0.0);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "no row");
                    check(Arrays.equals(ints, (Object[]) rs.getArray(1).getArray()), "int4[] came back as " + rs.getString(1) + at);
                    check(Arrays.equals(texts, (Object[]) rs.getArray(2).getArray()), "text[] came back as " + rs.getString(2) + at);
                    Object[] gotFloats = (Object[]) rs.getArray(3).getArray();
                    check(gotFloats.length == floats.length, "float8[] length " + gotFloats.length + at);
                    for (int i = 0; i < floats.length; i++) {
                        check(Double.doubleToRawLongBits(floats[i]) == Double.doubleToRawLongBits((Double) gotFloats[i]),
                                "float8[" + i + "]: sent " + floats[i] + ", got " + gotFloats[i] + at);
                    }
                    check(Arrays.equals(blob, rs.getBytes(4)), "bytea differs" + at);
                    rs.getLong(5);
                    check(rs.wasNull(), "NULL came back as " + rs.getString(5) + at);
                    check(rs.getLong(6) == Long.MAX_VALUE, "int8 came back as " + rs.getLong(6) + at);
                    check(Double.doubleToRawLongBits(rs.getDouble(7)) == Double.doubleToRawLongBits(-0.0),
                            "-0.0 came back as " + rs.getDouble(7) + at);
                }
            }
        }
        return "arrays with NULLs, -0/NaN/Inf floats, bytea, NULL identical over 6 executions";
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x));
        }
        return s.toString();
    }
}
