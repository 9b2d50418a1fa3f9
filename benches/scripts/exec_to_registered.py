"""exec -> registered: how long the release pgmux takes from exec until its register call reaches a minimal
Extensions API stand-in (20 starts). Run from the repository root after `cargo build --release -p pgmux`:
    python3 benches/scripts/exec_to_registered.py
"""
import http.server, json, os, subprocess, threading, time, statistics, socket
t_reg = {}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        if self.path.endswith("/extension/register"):
            t_reg["t"] = time.perf_counter()
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"functionName": "f", "functionVersion": "$LATEST", "handler": "h"}).encode()
            self.send_response(200); self.send_header("Lambda-Extension-Identifier", "x")
            self.send_header("Content-Length", str(len(body))); self.send_header("Connection", "close"); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        time.sleep(30)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
out = []
for i in range(20):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    env = {"AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{srv.server_address[1]}", "PGMUX_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db",
           "PGMUX_LISTEN": f"127.0.0.1:{port}", "PGMUX_SSLMODE": "disable", "PATH": os.environ["PATH"]}
    t_reg.clear()
    t0 = time.perf_counter()
    p = subprocess.Popen(["target/release/pgmux"], env=env, stderr=subprocess.DEVNULL)
    while "t" not in t_reg: time.sleep(0.0002)
    out.append((t_reg["t"] - t0) * 1000)
    p.kill(); p.wait()
print(f"exec -> register request received, release binary, 20 starts: median {statistics.median(out):.2f} ms, min {min(out):.2f}, max {max(out):.2f}")
