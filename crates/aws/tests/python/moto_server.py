"""moto's server (`python -m moto.server` arguments), tied to the test that started it.

On Linux the server asks to be killed when its parent goes away (PR_SET_PDEATHSIG), so a test binary that
is itself killed leaves no moto behind. The test kills it explicitly when it is done.
"""

import ctypes
import ctypes.util
import signal
import sys

PR_SET_PDEATHSIG = 1

if sys.platform.startswith("linux"):
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass

from moto.server import main  # noqa: E402  (after prctl: importing moto takes a while)

main(sys.argv[1:])
