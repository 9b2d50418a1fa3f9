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
  * Until pgmux reads pgbouncer.ini itself (issue 30, item 4; `pgmux --config pgbouncer.ini`), the view is a
    TEMPORARY translation into pgmux's TOML (`translate_to_toml`). Which one is used: CONFORMANCE_INI_MODE =
    `native` or `toml`; by default `native` when `pgmux --help` mentions pgbouncer.ini.
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
# Reading pgbouncer.ini: sections, `key = value` lines, `;` and `#` comments, `%include FILE`.


def read_ini(path, depth=0):
    """[(section, key, value)] in file order, %include expanded in place."""
    if depth > 10:
        fail(f"%include nested too deeply at {path}")
    out = []
    section = ""
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.lower().startswith("%include"):
            inc = line.split(None, 1)[1].strip()
            inc_path = Path(inc) if os.path.isabs(inc) else Path(path).parent / inc
            for sec, k, v in read_ini(inc_path, depth + 1):
                out.append((sec or section, k, v))
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        out.append((section, key.strip(), value.strip()))
    return out


def settings(entries):
    """The [pgbouncer] section as a dict (the last value of a key wins, as in PgBouncer)."""
    return {k.lower(): v for s, k, v in entries if s == "pgbouncer"}


def connstr_pairs(s):
    """A libpq-style `key=value ...` string as pairs (single quotes, `\\` escapes inside them)."""
    pairs, i, n = [], 0, len(s)
    while i < n:
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            break
        j = i
        while j < n and s[j] != "=" and not s[j].isspace():
            j += 1
        key = s[i:j]
        while j < n and s[j].isspace():
            j += 1
        if j >= n or s[j] != "=":
            pairs.append((key.lower(), None))  # malformed: let pgmux say so
            break
        j += 1
        while j < n and s[j].isspace():
            j += 1
        value = ""
        if j < n and s[j] == "'":
            j += 1
            while j < n and s[j] != "'":
                if s[j] == "\\" and j + 1 < n:
                    j += 1
                value += s[j]
                j += 1
            j += 1
        else:
            while j < n and not s[j].isspace():
                value += s[j]
                j += 1
        pairs.append((key.lower(), value))
        i = j
    return pairs


# ---------------------------------------------------------------------------------------------------------
# The view pgmux reads.


def native_view(text):
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


def toml_str(v):
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seconds_to_ms(v):
    try:
        return f'"{round(float(v) * 1000)}ms"'
    except ValueError:
        return toml_str(v)  # not a number: pgmux names the key and the value


# TEMPORARY (until pgmux reads pgbouncer.ini itself, issue 30 item 4): [pgbouncer] keys that have a pgmux
# equivalent, with how the value is written. Anything else is listed in one warning line in the log.
SAME_NUMBER = [
    "max_client_conn",
    "default_pool_size",
    "min_pool_size",
    "max_db_connections",
    "max_user_connections",
    "max_prepared_statements",
]
SECONDS = [
    "server_lifetime",
    "server_idle_timeout",
    "server_check_delay",
    "query_timeout",
    "query_wait_timeout",
    "client_idle_timeout",
    "idle_transaction_timeout",
    "client_login_timeout",
    "server_connect_timeout",
]
HANDLED_HERE = ["logfile", "pidfile", "listen_addr", "listen_port", "unix_socket_dir"]
ROUTE_KEYS = {"host", "port", "dbname", "user", "password", "pool_size", "min_pool_size", "max_db_connections",
              "pool_mode", "auth_user"}
USER_KEYS = {"password", "pool_size", "max_user_connections", "pool_mode"}


def translate_to_toml(entries):
    """TEMPORARY: test.ini in pgmux's TOML, for as long as pgmux cannot read pgbouncer.ini (see above)."""
    cfg = settings(entries)
    lines = ["# Generated by tests/conformance/pgbouncer-wrapper.py from the suite's test.ini (temporary)."]
    unsupported = []
    addr = cfg.get("listen_addr", "127.0.0.1").split(",")[0].strip()
    addr = {"*": "0.0.0.0", "": "127.0.0.1"}.get(addr, addr)
    if ":" in addr:
        addr = f"[{addr}]"
    lines.append(f"listen = {toml_str(addr + ':' + cfg.get('listen_port', '6432'))}")
    if cfg.get("unix_socket_dir"):
        lines.append(f"unix_socket_dir = {toml_str(cfg['unix_socket_dir'])}")
    for key, value in cfg.items():
        if key in HANDLED_HERE:
            continue
        if key == "auth_type":
            # trust, md5 and scram-sha-256 are pgmux's names too; any other (hba, cert, peer, pam, ldap, plain)
            # is passed as it is, so that pgmux refuses it rather than logging clients in some other way.
            lines.append(f"client_auth = {toml_str(value)}")
        elif key == "pool_mode":
            # statement: refused by pgmux by design (see above).
            lines.append(f"pool_mode = {toml_str('transaction' if value == 'statement' else value)}")
        elif key == "auth_file":
            lines.append(f"auth_file = {toml_str(value)}")
        elif key in ("admin_users", "stats_users"):
            lines.append(f"{key} = {toml_str(value)}")
        elif key in SAME_NUMBER:
            lines.append(f"{key} = {value if value.isdigit() else toml_str(value)}")
        elif key in SECONDS:
            lines.append(f"{key} = {seconds_to_ms(value)}")
        elif key == "tcp_keepalive":
            lines.append(f"tcp_keepalive = {'true' if value.lower() in ('1', 'on', 'yes', 'true') else 'false'}")
        else:
            unsupported.append(key)
    if "admin_users" not in cfg:
        # PgBouncer lets the OS user it runs as in as `pgbouncer` over its Unix socket (peer credentials), and the
        # suite opens the console that way; pgmux admits admin_users only (a gap: docs/compatibility.md).
        lines.append('admin_users = "pgbouncer"')
    # PgBouncer has no cap on all pools together and reads nothing from the server to size them; pgmux's budget
    # from max_connections (a control connection) is turned off and the cap set near the server's 100.
    lines.append("max_connections_percent = 0")
    lines.append("pool_max = 80")
    skipped = []
    for section, kind, allowed in (("databases", "databases", ROUTE_KEYS), ("users", "users", USER_KEYS)):
        for s, name, value in entries:
            if s != section:
                continue
            lines.append(f"[[{kind}]]")
            lines.append(f"name = {toml_str(name)}")
            for k, v in connstr_pairs(value):
                if v is None:
                    lines.append(f"{k} = true  # malformed in test.ini")
                elif k not in allowed:
                    skipped.append(f"{name}.{k}")
                elif k == "pool_mode" and v == "statement":
                    lines.append('pool_mode = "transaction"')
                elif k in ("port", "pool_size", "min_pool_size", "max_db_connections", "max_user_connections") \
                        and v.isdigit():
                    lines.append(f"{k} = {v}")
                else:
                    lines.append(f"{k} = {toml_str(v)}")
    return "\n".join(lines) + "\n", unsupported, skipped


def pgmux_reads_ini():
    mode = os.environ.get("CONFORMANCE_INI_MODE", "auto")
    if mode in ("native", "toml"):
        return mode == "native"
    try:
        help_text = subprocess.run([PGMUX, "--help"], capture_output=True, text=True, timeout=10).stdout
    except Exception:
        return False
    return "pgbouncer.ini" in help_text.lower()


class View:
    """The file pgmux is given: a named pipe that this process answers every time pgmux opens it, with test.ini
    as it is at that moment, rendered for pgmux. The suite edits test.ini and sends RELOAD on the console in the
    next breath; a copy refreshed by polling could be read before it caught up, the pipe cannot."""

    def __init__(self, ini, native, log):
        self.ini, self.native, self.log = Path(ini), native, log
        self.path = self.ini.with_name(self.ini.name + (".pgmux.ini" if native else ".pgmux.toml"))
        self.warned = None

    def render(self):
        if self.native:
            return native_view(self.ini.read_text())
        text, unsupported, skipped = translate_to_toml(read_ini(self.ini))
        missing = unsupported + skipped
        if missing and missing != self.warned:
            self.warned = missing
            print(f"pgbouncer-wrapper: WARNING settings of {self.ini.name} the temporary translation has no "
                  f"pgmux equivalent for: {', '.join(missing)}", file=self.log, flush=True)
        return text

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
    entries = read_ini(ini)
    cfg = settings(entries)
    log_path = cfg.get("logfile") or None
    log = open(log_path, "a", buffering=1) if log_path else sys.stderr
    view = View(ini, pgmux_reads_ini(), log)
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
