"""Holds N idle clients on a pooler (each logged in and through one `select 1`) and prints the pooler's memory
before and after from /proc: VmRSS, RssAnon (its own heap and stacks), RssFile (mapped binaries, shared).

    idle_rss_clients.py HOST PORT N PID      (used by idle-rss.sh)
"""
import asyncio, struct, sys, os
host, port, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def startup():
    body = struct.pack('!i', 196608) + b'user\0postgres\0database\0postgres\0\0'
    return struct.pack('!i', len(body) + 4) + body
def query(sql):
    b = sql.encode() + b'\0'
    return b'Q' + struct.pack('!i', len(b) + 4) + b
async def until_ready(r):
    while True:
        hdr = await r.readexactly(5)
        body = await r.readexactly(struct.unpack('!i', hdr[1:])[0] - 4)
        if hdr[0:1] == b'E': raise RuntimeError(body)
        if hdr[0:1] == b'Z': return
async def one(sem, held):
    async with sem:
        r, w = await asyncio.open_connection(host, port)
        w.write(startup()); await until_ready(r)
        w.write(query('select 1')); await until_ready(r)
        held.append((r, w))
def mem():
    out = {}
    for line in open(f'/proc/{pid}/status'):
        k = line.split(':')[0]
        if k in ('VmRSS', 'RssAnon', 'RssFile', 'VmHWM'): out[k] = line.split()[1]
    return out
async def main():
    before = mem()
    print('before', before, flush=True)
    held, sem = [], asyncio.Semaphore(200)
    await asyncio.gather(*(one(sem, held) for _ in range(n)))
    await asyncio.sleep(float(os.environ.get("SETTLE", "1")))
    after = mem()
    print('after', len(held), after, flush=True)
    per = (int(after['RssAnon']) - int(before['RssAnon'])) * 1024 / max(len(held), 1)
    print(f'anonymous bytes per idle client: {per:.0f}', flush=True)
asyncio.run(main())
