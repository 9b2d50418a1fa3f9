package matrix;

import static matrix.Failures.check;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * S16, the Unix socket. pgjdbc opens its sockets through a {@code socketFactory}; junixsocket's
 * {@code AFUNIXSocketFactory$FactoryArg} gives it one on the file named by {@code socketFactoryArg},
 * {@code <MATRIX_SOCKET_DIR>/.s.PGSQL.<port>}, for the host {@code localhost}, which is how a JDBC application
 * reaches a local socket. Four
 * clients run 25 transactions each; the server must have seen the pooler's TCP connection (directly: a
 * Unix client), on at most MATRIX_POOL_MAX backends.
 */
final class Sockets {
    private Sockets() {}

    static final int CLIENTS = 4;
    static final int TXNS = 25;

    static String s16UnixSocket(Run r) throws Exception {
        String path = r.env.socketDir() + "/.s.PGSQL." + r.env.port();
        ExecutorService pool = r.threads(CLIENTS, "s16");
        Set<Integer> pids = Collections.synchronizedSet(new HashSet<>());
        AtomicInteger unixClients = new AtomicInteger();
        List<Future<Integer>> results = new ArrayList<>();
        for (int c = 0; c < CLIENTS; c++) {
            results.add(pool.submit(() -> {
                Properties props = r.props(r.app());
                props.setProperty("socketFactory", "org.newsclub.net.unix.AFUNIXSocketFactory$FactoryArg");
                props.setProperty("socketFactoryArg", path);
                int done = 0;
                // junixsocket maps only the name localhost to the socket file (an address it would refuse).
                String url = "jdbc:postgresql://localhost:" + r.env.port() + "/" + r.env.database();
                try (Connection conn = r.connect(url, props); Statement st = conn.createStatement()) {
                    conn.setAutoCommit(false);
                    for (int n = 0; n < TXNS; n++) {
                        try (ResultSet rs = st.executeQuery("SELECT pg_backend_pid(), inet_client_addr() IS NULL")) {
                            check(rs.next(), "transaction " + n + ": no row");
                            pids.add(rs.getInt(1));
                            if (rs.getBoolean(2)) {
                                unixClients.incrementAndGet();
                            }
                        }
                        conn.commit();
                        done++;
                    }
                }
                return done;
            }));
        }
        int total = 0;
        for (Future<Integer> f : results) {
            total += f.get();
        }
        check(total == CLIENTS * TXNS, total + " of " + CLIENTS * TXNS + " transactions done");
        String client;
        if (r.env.direct()) {
            check(unixClients.get() == total, (total - unixClients.get()) + " of " + total + " transactions had a TCP client");
            client = "a Unix client";
        } else {
            check(unixClients.get() == 0, unixClients.get() + " of " + total + " transactions ran on a Unix-socket backend");
            check(pids.size() <= r.env.poolMax(), pids.size() + " backends for MATRIX_POOL_MAX=" + r.env.poolMax());
            client = "the pooler's TCP connection";
        }
        return total + " txns through " + path + " (junixsocket), " + pids.size() + " backends, each saw " + client;
    }
}
