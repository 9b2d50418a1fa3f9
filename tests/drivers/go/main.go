// Command matrix is the pgx v5 suite of pgmux's driver compatibility matrix (tests/drivers/README.md).
//
// It runs every scenario pgx can express in three query-execution modes and prints one line per scenario,
// `<driver> <scenario> PASS|FAIL <detail>`, then `N passed, N failed`. Arguments, if any, narrow the run
// to some drivers or scenarios (`pgx`, `pgx-exec/S4`); the runner passes none.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// driver is one configuration of pgx: a query-execution mode and the scenarios that mode makes meaningful.
type driver struct {
	name      string
	mode      pgx.QueryExecMode
	scenarios []string
}

// drivers lists the configurations in the order they run. The mode-independent scenarios (simple query,
// COPY, notices, explicit statement names) run only in the default mode: the other modes send the same
// messages for them. S10 runs in the exec mode too, so its leak probe is not hidden behind a statement
// error while pgmux does not track named statements.
var drivers = []driver{
	{"pgx", pgx.QueryExecModeCacheStatement, []string{
		"S1", "S2", "S3", "S4", "S5a", "S5b", "S5c", "S5d", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13", "S15",
		"S16", "S17",
	}},
	{"pgx-exec", pgx.QueryExecModeExec, []string{
		"S1", "S3", "S4", "S5a", "S5c", "S5d", "S7", "S8", "S10", "S11", "S15",
	}},
	{"pgx-describe_exec", pgx.QueryExecModeDescribeExec, []string{"S3", "S11", "S14", "S15"}},
}

// scenarios maps a scenario ID to its body. A body returns the PASS detail, or an error that becomes the
// FAIL detail; every PASS is backed by assertions inside the body.
var scenarios = map[string]func(*run) (string, error){
	"S1": s1Startup, "S2": s2SimpleQuery, "S3": s3Types, "S4": s4PreparedChurn,
	"S5a": s5aDivisionByZero, "S5b": s5bBadParse, "S5c": s5cBatchError, "S5d": s5dCachedPlan,
	"S6": s6Copy, "S7": s7Stream, "S8": s8Cancel, "S9": s9Notices, "S10": s10SessionState,
	"S11": s11Binary, "S12": s12Deallocate, "S13": s13NameCollisions, "S14": s14UnnamedAcrossSyncs,
	"S15": s15Pipeline, "S16": s16UnixSocket, "S17": s17Routes,
}

// checkGrace is the time kept for the idle-in-transaction check after a scenario: 3 s, or a quarter of
// MATRIX_TIMEOUT_S when that is shorter.
func checkGrace(e *env) time.Duration { return min(3*time.Second, e.timeout/4) }

func main() {
	e, err := loadEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(2)
	}
	plan := selectPlan(os.Args[1:])
	if len(plan) == 0 {
		fmt.Fprintln(os.Stderr, "matrix: no scenario matches", strings.Join(os.Args[1:], " "))
		os.Exit(2)
	}

	// The contract's budget: MATRIX_TIMEOUT_S × (scenarios + 1) for the whole suite.
	suiteDeadline := time.Now().Add(e.timeout * time.Duration(len(plan)+1))
	o := newOracle(e)
	defer o.close()

	passed, failed := 0, 0
	for _, step := range plan {
		ok, detail := runOne(e, o, step.drv, step.id, suiteDeadline)
		verdict := "PASS"
		if ok {
			passed++
		} else {
			verdict = "FAIL"
			failed++
		}
		fmt.Printf("%s %s %s %s\n", step.drv.name, step.id, verdict, oneLine(detail))
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
}

type step struct {
	drv *driver
	id  string
}

// selectPlan returns the (driver, scenario) pairs to run: all of them, or those named by the filters.
func selectPlan(filters []string) []step {
	var plan []step
	for i := range drivers {
		d := &drivers[i]
		for _, id := range d.scenarios {
			if matches(filters, d.name, id) {
				plan = append(plan, step{d, id})
			}
		}
	}
	return plan
}

func matches(filters []string, drv, id string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		name, sc, hasScenario := strings.Cut(f, "/")
		if name == drv && (!hasScenario || strings.EqualFold(sc, id)) {
			return true
		}
	}
	return false
}

// runOne runs one scenario under its own deadline, closes whatever it left open, and then asks the oracle
// whether any backend of the application user was left idle in transaction.
func runOne(e *env, o *oracle, d *driver, id string, suiteDeadline time.Time) (bool, string) {
	budget := min(e.timeout, time.Until(suiteDeadline)-checkGrace(e))
	if budget < time.Second {
		return false, "suite time budget (MATRIX_TIMEOUT_S × (scenarios + 1)) exhausted before this scenario"
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()

	r := &run{ctx: ctx, env: e, drv: d, oracle: o}
	type outcome struct {
		detail string
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("panic: %v", p)}
			}
		}()
		detail, err := scenarios[id](r)
		done <- outcome{detail, err}
	}()

	var res outcome
	select {
	case res = <-done:
		r.closeAll()
	case <-time.After(budget + time.Second):
		// The body ignored its context: cut its sockets so nothing it started outlives the scenario.
		r.abortAll()
		res = outcome{err: fmt.Errorf("timed out after %s (MATRIX_TIMEOUT_S)", budget.Round(time.Second))}
	}
	if res.err == nil && ctx.Err() != nil {
		res.err = fmt.Errorf("timed out after %s (MATRIX_TIMEOUT_S)", budget.Round(time.Second))
	}

	leftover := o.waitNoIdleInTransaction(checkGrace(e))
	switch {
	case res.err != nil && leftover != nil:
		return false, describe(res.err) + "; and " + describe(leftover)
	case res.err != nil:
		return false, describe(res.err)
	case leftover != nil:
		return false, res.detail + "; but " + describe(leftover)
	}
	return true, res.detail
}
