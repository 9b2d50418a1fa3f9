"""Writes a deterministic zip: entries in sorted order, a fixed timestamp, and Unix modes 0755 (files that
are executable here) or 0644, whatever the builder's clock and umask. The same inputs give the same bytes.

Lambda unpacks layers into /opt and starts every executable file in /opt/extensions as an external
extension, so the layer's one entry must be extensions/pgmux with mode 0755.

usage: python3 detzip.py OUT.zip NAME=PATH...
  NAME=PATH  store the file PATH as NAME, or every file under the directory PATH as NAME/...
             (NAME may be empty: NAME=DIR stores DIR's contents at the root)
"""

import os
import stat
import sys
import zipfile

# The earliest time a zip can hold (DOS dates start in 1980).
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def entries(name: str, path: str):
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                full = os.path.join(root, f)
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                yield (f"{name}/{rel}" if name else rel), full
    else:
        yield name, path


def main() -> None:
    out, specs = sys.argv[1], sys.argv[2:]
    items = []
    for spec in specs:
        name, _, path = spec.partition("=")
        items.extend(entries(name.strip("/"), path))
    items.sort()
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w") as z:
        for name, path in items:
            executable = os.stat(path).st_mode & stat.S_IXUSR
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.create_system = 3  # Unix, so that external_attr carries the mode
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as f:
                z.writestr(info, f.read(), compresslevel=9)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
