"""A stand-in for Lambda's Extensions API (2020-01-01), enough to run the layer's binary as Lambda would.

Answers register (with an extension id), holds event/next until told to shut down, then sends SHUTDOWN
with a deadline 2 s ahead (epoch milliseconds, as Lambda does), and records init/error and exit/error.
A test drives it over HTTP on the same port:
  POST /test/shutdown  release event/next with SHUTDOWN
  GET  /test/state     what happened so far, as JSON
Prints its port on stdout, then serves until killed.

usage: python3 fake_extensions_api.py
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

state = {"registered": [], "next_calls": 0, "errors": [], "shutdown_sent": False}
lock = threading.Lock()
shutdown = threading.Event()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self):
        if self.path == "/2020-01-01/extension/register":
            request = json.loads(self.body() or b"{}")
            with lock:
                state["registered"].append(
                    {"name": self.headers.get("Lambda-Extension-Name"), "events": request.get("events")}
                )
            body = {"functionName": "pgmux-sample", "functionVersion": "1", "handler": "index.handler"}
            self.reply(200, body, {"Lambda-Extension-Identifier": str(uuid.uuid4())})
        elif self.path in ("/2020-01-01/extension/init/error", "/2020-01-01/extension/exit/error"):
            with lock:
                state["errors"].append(
                    {"path": self.path, "type": self.headers.get("Lambda-Extension-Function-Error-Type")}
                )
            self.reply(202, {"status": "OK"})
        elif self.path == "/test/shutdown":
            self.body()
            shutdown.set()
            self.reply(200, {})
        else:
            self.reply(404, {"errorType": "NotFound", "errorMessage": self.path})

    def do_GET(self):
        if self.path == "/2020-01-01/extension/event/next":
            with lock:
                state["next_calls"] += 1
            shutdown.wait()
            with lock:
                state["shutdown_sent"] = True
            deadline = int(time.time() * 1000) + 2000
            self.reply(200, {"eventType": "SHUTDOWN", "shutdownReason": "spindown", "deadlineMs": deadline})
        elif self.path == "/test/state":
            with lock:
                self.reply(200, state)
        else:
            self.reply(404, {"errorType": "NotFound", "errorMessage": self.path})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
