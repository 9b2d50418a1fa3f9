package matrix;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

/** Failure messages that carry the SQLSTATE, and the checks scenarios make. */
final class Failures {
    private Failures() {}

    /** An assertion that did not hold; its message is the FAIL detail. */
    static final class Check extends Exception {
        private static final long serialVersionUID = 1L;

        Check(String message) {
            super(message);
        }

        Check(String message, Throwable cause) {
            super(message, cause);
        }
    }

    static void check(boolean ok, String message) throws Check {
        if (!ok) {
            throw new Check(message);
        }
    }

    /** The SQLSTATE of the first SQLException in the cause chain, or null. */
    static String sqlstate(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof SQLException s && s.getSQLState() != null) {
                return s.getSQLState();
            }
        }
        return null;
    }

    /** Throws unless {@code e} carries {@code state}. */
    static void expectState(Throwable e, String state, String what) throws Check {
        if (e == null) {
            throw new Check(what + ": succeeded, expected SQLSTATE " + state);
        }
        if (!state.equals(sqlstate(e))) {
            throw new Check(what + ": expected SQLSTATE " + state + ", got", e);
        }
    }

    /**
     * Renders a failure for a FAIL line: the context of each Check, then the server's message with its
     * SQLSTATE, as {@code ERROR: prepared statement "S_1" already exists (42P05)}.
     */
    static String describe(Throwable t) {
        List<String> parts = new ArrayList<>();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof SQLException s) {
                parts.add(render(s));
                break;
            }
            if (c instanceof Check) {
                parts.add(c.getMessage());
                continue;
            }
            parts.add(c.getMessage() == null ? c.toString() : c.getMessage());
            break;
        }
        return String.join(": ", parts);
    }

    private static String render(SQLException s) {
        String msg = s.getMessage();
        if (s.getSQLState() != null) {
            msg += " (" + s.getSQLState() + ")";
        }
        SQLException next = s.getNextException();
        if (next != null && next.getMessage() != null && !msg.contains(next.getMessage())) {
            msg += "; next: " + next.getMessage() + " (" + next.getSQLState() + ")";
        }
        return msg;
    }

    static String oneLine(String s) {
        return s == null ? "" : s.trim().replaceAll("\\s+", " ");
    }
}
