package matrix;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The pgjdbc suite of pgmux's driver compatibility matrix (tests/drivers/README.md).
 *
 * <p>Runs every scenario pgjdbc can express under three {@code prepareThreshold} settings and prints one line
 * per scenario, {@code <driver> <scenario> PASS|FAIL <detail>}, then {@code N passed, N failed}. Arguments,
 * if any, narrow the run ({@code pgjdbc}, {@code pgjdbc-prepare0/S4}); the runner passes none.
 */
public final class Main {
    /** A body returns the PASS detail or throws; every PASS is backed by assertions inside the body. */
    @FunctionalInterface
    interface Scenario {
        String run(Run r) throws Exception;
    }

    /** One configuration of pgjdbc and the scenarios it makes meaningful. */
    record Driver(String name, int prepareThreshold, List<String> scenarios) {}

    /**
     * The mode-independent scenarios (simple query, COPY, notices, session state) run with the default
     * threshold only. S13 is left out of prepare0, which never names a statement.
     */
    static final List<Driver> DRIVERS = List.of(
            new Driver("pgjdbc", 5, List.of("S1", "S2", "S3", "S4", "S5a", "S5c", "S5d", "S6", "S7", "S8", "S9",
                    "S10", "S11", "S12", "S13", "S15", "S16", "S17")),
            new Driver("pgjdbc-prepare0", 0, List.of("S1", "S3", "S4", "S5a", "S5c", "S5d", "S7", "S8", "S10",
                    "S11", "S12", "S15", "S17")),
            new Driver("pgjdbc-forcebinary", -1, List.of("S1", "S3", "S4", "S5a", "S5c", "S5d", "S7", "S8",
                    "S11", "S12", "S13", "S15")));

    record Step(Driver driver, String id) {}

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("S1", Basics::s1Startup);
        SCENARIOS.put("S2", Basics::s2SimpleQuery);
        SCENARIOS.put("S3", Basics::s3Types);
        SCENARIOS.put("S4", Load::s4PreparedChurn);
        SCENARIOS.put("S5a", ErrorPaths::s5aDivisionByZero);
        SCENARIOS.put("S5c", ErrorPaths::s5cBatchError);
        SCENARIOS.put("S5d", ErrorPaths::s5dCachedPlan);
        SCENARIOS.put("S6", Copy::s6Copy);
        SCENARIOS.put("S7", Load::s7FetchSize);
        SCENARIOS.put("S8", Load::s8Cancel);
        SCENARIOS.put("S9", Session::s9Notices);
        SCENARIOS.put("S10", Session::s10SessionState);
        SCENARIOS.put("S11", Basics::s11Binary);
        SCENARIOS.put("S12", Statements::s12Deallocate);
        SCENARIOS.put("S13", Statements::s13NameCollisions);
        SCENARIOS.put("S15", Statements::s15Batch);
        SCENARIOS.put("S16", Sockets::s16UnixSocket);
        SCENARIOS.put("S17", Routes::s17Routes);
    }

    /**
     * Time kept for the idle-in-transaction check after a scenario: 3 s, or a quarter of MATRIX_TIMEOUT_S
     * when that is shorter.
     */
    static Duration checkGrace(Env env) {
        Duration quarter = env.timeout().dividedBy(4);
        return quarter.compareTo(Duration.ofSeconds(3)) < 0 ? quarter : Duration.ofSeconds(3);
    }

    private Main() {}

    public static void main(String[] args) {
        Env env;
        try {
            env = Env.load();
        } catch (IllegalArgumentException e) {
            System.err.println("matrix: " + e.getMessage());
            System.exit(2);
            return;
        }
        List<Step> plan = new ArrayList<>();
        for (Driver d : DRIVERS) {
            for (String id : d.scenarios()) {
                if (matches(args, d.name(), id)) {
                    plan.add(new Step(d, id));
                }
            }
        }
        if (plan.isEmpty()) {
            System.err.println("matrix: no scenario matches " + String.join(" ", args));
            System.exit(2);
        }

        // The contract's budget: MATRIX_TIMEOUT_S × (scenarios + 1) for the whole suite.
        Instant suiteDeadline = Instant.now().plus(env.timeout().multipliedBy(plan.size() + 1));
        ExecutorService bodies = Executors.newCachedThreadPool(Run.daemon("scenario"));
        int passed = 0;
        int failed = 0;
        try (Oracle oracle = new Oracle(env)) {
            for (Step step : plan) {
                Driver d = step.driver();
                String id = step.id();
                String[] outcome = runOne(env, oracle, d, id, suiteDeadline, bodies);
                if (outcome[0].equals("PASS")) {
                    passed++;
                } else {
                    failed++;
                }
                System.out.println(d.name() + " " + id + " " + outcome[0] + " " + Failures.oneLine(outcome[1]));
                System.out.flush();
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.out.flush();
        bodies.shutdownNow();
        System.exit(0); // a body that ignored its deadline must not keep the JVM alive
    }

    static boolean matches(String[] filters, String driver, String id) {
        if (filters.length == 0) {
            return true;
        }
        for (String f : filters) {
            String[] parts = f.split("/", 2);
            if (parts[0].equals(driver) && (parts.length == 1 || parts[1].equalsIgnoreCase(id))) {
                return true;
            }
        }
        return false;
    }

    /**
     * Runs one scenario under its own deadline, closes whatever it left open, then asks the oracle whether
     * any backend of the application user was left idle in transaction.
     */
    static String[] runOne(Env env, Oracle oracle, Driver d, String id, Instant suiteDeadline, ExecutorService bodies) {
        Duration left = Duration.between(Instant.now(), suiteDeadline).minus(checkGrace(env));
        Duration budget = left.compareTo(env.timeout()) < 0 ? left : env.timeout();
        if (budget.compareTo(Duration.ofSeconds(1)) < 0) {
            return new String[] {"FAIL", "suite time budget (MATRIX_TIMEOUT_S × (scenarios + 1)) exhausted before this scenario"};
        }
        Run r = new Run(env, d, oracle, Instant.now().plus(budget));
        Future<String> body = bodies.submit(() -> SCENARIOS.get(id).run(r));
        String detail = null;
        Throwable failure = null;
        try {
            detail = body.get(budget.toMillis() + 1000, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            r.abortAll(); // cut the sockets so nothing the body started outlives the scenario
            body.cancel(true);
            failure = new Failures.Check("timed out after " + budget.toSeconds() + "s (MATRIX_TIMEOUT_S)");
        } catch (ExecutionException e) {
            failure = e.getCause();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            failure = e;
        } finally {
            r.closeAll();
        }
        if (failure == null && r.expired()) {
            failure = new Failures.Check("timed out after " + budget.toSeconds() + "s (MATRIX_TIMEOUT_S)");
        }

        String leftover = oracle.waitNoIdleInTransaction(checkGrace(env));
        if (failure != null) {
            String msg = Failures.describe(failure);
            return new String[] {"FAIL", leftover == null ? msg : msg + "; and " + leftover};
        }
        if (leftover != null) {
            return new String[] {"FAIL", detail + "; but " + leftover};
        }
        return new String[] {"PASS", detail};
    }
}
