"""A stand-in for torchrun's agent, which hpcbundle-torchenv's agent mode runs as `PYTHON -m torch_agent WHAT`:
`env` prints the environment it got; `worker` starts one worker as torchrun does (a session of its own, so no
process-group signal reaches it), which says `ready`, waits for USR1 and exits 0 on it, and exits as it did."""

import os
import subprocess
import sys

WORKER = """
import signal, sys
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))
print("ready", flush=True)
signal.pause()
"""

if sys.argv[1] == "env":
    print(sorted((k, v) for k, v in os.environ.items() if k.isupper()))
else:
    worker = subprocess.Popen([sys.executable, "-c", WORKER], start_new_session=True)
    sys.exit(worker.wait())
