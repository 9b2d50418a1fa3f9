#!/usr/bin/env python3
"""pgmux in the place of PgBouncer's binary, for PgBouncer's own test suite (tests/conformance/run.sh).

The suite runs `<copy>/pgbouncer [--quiet] [--reboot] <config_dir>/test.ini` (utils.py, Bouncer.start), then
reads `logfile` for log lines, sends signals to the process it started (SIGHUP reload, SIGQUIT stop, ...),
and edits test.ini before a `RELOAD` on the console. run.sh installs this file at that path, with
PGMUX_BIN set to pgmux's release binary. Everything pgmux does differently from PgBouncer here is said below,
where it is done; nothing of the suite is edited.

This process stays pgmux's parent (rather than exec'ing it), because pgmux must not read test.ini as it is:
  * test.ini sets `pool_mode = statement`, which pgmux refuses by design (it never ends a client's
    transaction for it; multi-statement transactions would break). pgmux reads a view of test.ini with that
    one setting changed to `transaction`: a named pipe this process answers each time pgmux opens it (start-up,
    SIGHUP, RELOAD) with test.ini as it is then, so reloads see the suite's edits (class View).
  * The suite enters the console as user `pgbouncer` over the Unix socket, which PgBouncer admits by peer
    credentials; pgmux admits admin_users only, so the view adds `admin_users = pgbouncer` when test.ini has none.
pgmux reads the view as PgBouncer's own file (`pgmux --config FILE.ini`, issue 30 item 4).
Signals are passed on as they come, except SIGQUIT (PgBouncer's immediate shutdown, how the suite stops it):
pgmux has no immediate shutdown (SIGTERM / SIGINT drain open transactions for shutdown_timeout), so SIGQUIT
becomes SIGKILL: server connections are dropped as PgBouncer's immediate shutdown drops them.
pgmux has no `logfile` setting (it logs to stderr, for journald, CloudWatch and containers): its output is
appended to the file test.ini's `logfile` names, which is where the suite reads the log.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PGMUX = os.environ.get("PGMUX_BIN", "")


def fail(msg):
    print(f"pgbouncer-wrapper: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------------------
# The view pgmux reads.


def pgmux_view(text):
    """test.ini as it is but for `pool_mode = statement` (refused by pgmux by design, see above), which
    becomes transaction: in [pgbouncer], and in database and user entries."""
    out, section = [], ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip().lower()
        elif section == "pgbouncer" and re.match(r"(?i)^pool_mode\s*=\s*statement\s*$", s):
            # (A comment on a line of its own: in pgbouncer.ini a `;` after a value is part of the value.)
            out.append("; statement in the suite's test.ini: refused by pgmux by design (pgbouncer-wrapper.py)")
            line = "pool_mode = transaction"
        elif section in ("databases", "users"):
            line = re.sub(r"(?i)\bpool_mode\s*=\s*statement\b", "pool_mode=transaction", line)
        elif section == "pgbouncer" and (m := re.match(r"(?i)^admin_users\s*=\s*(.*)$", s)):
            # A list without `pgbouncer`: PgBouncer still lets its own OS user in as `pgbouncer` over the Unix
            # socket (peer credentials, below), which is how the suite puts its configuration back after a
            # test that names other admins; pgmux needs the name in the list.
            names = [n.strip() for n in m.group(1).split(",") if n.strip()]
            if "pgbouncer" not in names:
                out.append("; pgbouncer added by tests/conformance/pgbouncer-wrapper.py (peer credentials, below)")
                line = "admin_users = " + ", ".join(names + ["pgbouncer"])
        out.append(line)
    if not any(s == "pgbouncer" and k.lower() == "admin_users" for s, k, _ in read_ini_text(text)):
        # PgBouncer lets the OS user it runs as in as `pgbouncer` over its Unix socket (peer credentials), and
        # the suite opens the console that way; pgmux admits admin_users only (a gap: docs/compatibility.md).
        out += ["[pgbouncer]", "; added by tests/conformance/pgbouncer-wrapper.py", "admin_users = pgbouncer"]
    return "\n".join(out) + "\n"


def read_ini_text(text):
    """(section, key, value) of the lines of one file, %include not followed (enough to see a key is set)."""
    section, out = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#" or line.startswith("%"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
        elif "=" in line:
            k, v = line.split("=", 1)
            out.append((section, k.strip(), v.strip()))
    return out


class View:
    """The file pgmux is given: a named pipe that this process answers every time pgmux opens it, with test.ini
    as it is at that moment, rendered for pgmux. The suite edits test.ini and sends RELOAD on the console in the
    next breath; a copy refreshed by polling could be read before it caught up, the pipe cannot."""

    def __init__(self, ini):
        self.ini = Path(ini)
        # `.ini`: pgmux reads a file of that name as PgBouncer's.
        self.path = self.ini.with_name(self.ini.name + ".pgmux.ini")

    def render(self):
        return pgmux_view(self.ini.read_text())

    def serve(self):
        """Forever: wait for pgmux to open the pipe, write the rendering, close. Runs in a thread."""
        while True:
            with open(self.path, "w") as f:  # blocks until pgmux opens the pipe for reading
                # Rendered now, not before the open: test.ini as it is when pgmux reads it.
                try:
                    text = self.render()
                except Exception as e:  # an unreadable test.ini: pgmux gets nothing it could take for a config
                    text = f"# pgbouncer-wrapper could not read {self.ini}: {e}\n"
                f.write(text)
            # pgmux reads to the end and closes; opening again before it has closed would write into the
            # same reader.
            time.sleep(0.05)

    def start(self):
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.mkfifo(self.path, 0o600)
        threading.Thread(target=self.serve, daemon=True).start()


def main():
    if not PGMUX or not os.access(PGMUX, os.X_OK):
        fail(f"PGMUX_BIN must name pgmux's binary (got {PGMUX!r})")
    args = sys.argv[1:]
    # --version and --help: pgmux's own answer (the suite compares `--version`'s first line to SHOW VERSION).
    for flag in ("--version", "-V", "--help", "-h"):
        if flag in args:
            os.execv(PGMUX, [PGMUX, flag])
    files = [a for a in args if not a.startswith("-")]
    flags = [a for a in args if a.startswith("-")]
    if len(files) != 1:
        fail(f"expected one configuration file, got {args}")
    for flag in flags:
        if flag in ("--quiet", "-q", "-v", "--verbose"):
            continue  # PgBouncer's console verbosity; pgmux's log level is log_level
        # --reboot / -R (online restart taking over the old process's sockets) and -d / --daemon: pgmux has
        # neither (gaps, docs/compatibility.md). Refused, so the test that needs them fails visibly.
        fail(f"pgmux has no equivalent of PgBouncer's {flag}")
    ini = Path(files[0])
    # The last value of a key wins, as in PgBouncer (the suite appends its own logfile and pidfile).
    cfg = {k.lower(): v for section, k, v in read_ini_text(ini.read_text()) if section == "pgbouncer"}
    log_path = cfg.get("logfile") or None
    log = open(log_path, "a", buffering=1) if log_path else sys.stderr
    view = View(ini)
    view.start()

    child = subprocess.Popen([PGMUX, "--config", str(view.path)], stdout=log, stderr=log, close_fds=True)
    pidfile = cfg.get("pidfile")
    if pidfile:
        Path(pidfile).write_text(f"{child.pid}\n")

    def forward(signum, _frame):
        if signum == signal.SIGQUIT:
            signum = signal.SIGKILL  # immediate shutdown (see above)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)

    while True:
        code = child.poll()
        if code is not None:
            break
        time.sleep(0.05)
    if pidfile:
        try:
            os.unlink(pidfile)
        except OSError:
            pass
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
