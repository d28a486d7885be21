"""The set-up's Apptainer for tests: found (the host's, or the venv's from scripts/setup/apptainer.sh),
else installed by that script; and builds as root inside a user namespace.

Why the namespace: Apptainer's build as root asks for every capability, and a container sandbox's
root often lacks some (here CAP_SYS_RESOURCE: "Requesting capability set ... while permitted ...").
In a new user namespace that maps uids and gids 0-65535 to themselves, root has them all, and the
image's files keep their owners. Run a command that way with

    python -m hpcbundle_testbed.apptainer apptainer build base.sif base.def

(e.g. `make build-sif SIF_FLAGS= SIF_SUDO="python -m hpcbundle_testbed.apptainer"`). A user that is
not root builds with `--fakeroot` instead (with /etc/subuid and /etc/subgid entries).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SETUP_SCRIPT = REPO / "scripts" / "setup" / "apptainer.sh"
CLONE_NEWUSER = 0x10000000
ID_RANGE = 65536
"""The uids and gids the build namespace maps to themselves (those a Debian base image's files use)."""


def find_apptainer() -> str | None:
    """`apptainer` (else `singularity`) on PATH, else in the running venv's bin/."""
    search = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.prefix) / "bin")])
    for command in ("apptainer", "singularity"):
        found = shutil.which(command, path=search)
        if found:
            return found
    return None


def ensure_apptainer(timeout: float = 600) -> str:
    """The Apptainer to test with; where there is none, scripts/setup/apptainer.sh installs one into the
    running venv. RuntimeError with the script's last lines when that fails."""
    found = find_apptainer()
    if found:
        return found
    res = subprocess.run(
        ["bash", str(SETUP_SCRIPT), sys.prefix], capture_output=True, text=True, timeout=timeout, check=False
    )
    found = find_apptainer()
    if res.returncode or not found:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-5:])
        raise RuntimeError(
            f"{SETUP_SCRIPT.name} {sys.prefix} could not install Apptainer (exit {res.returncode}): {tail}"
        )
    return found


def build_argv(apptainer: str, sif: Path, definition: Path) -> list[str]:
    """`apptainer build` of `definition` into `sif`: as root in a full user namespace, else with --fakeroot."""
    if os.geteuid() == 0:
        return [sys.executable, "-m", __name__, apptainer, "build", str(sif), str(definition)]
    return [apptainer, "build", "--fakeroot", str(sif), str(definition)]


def run_in_user_namespace(argv: list[str]) -> int:
    """Run `argv` as root of a new user namespace mapping ids 0..ID_RANGE-1 to themselves (the caller
    must be root, to write such maps); its exit status."""
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: unshare, wait for its maps, become the command
        os.close(ready_read)
        os.close(go_write)
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(126)
        os.write(ready_write, b"1")
        if os.read(go_read, 1) != b"1":
            os._exit(126)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
            os._exit(127)
    os.close(ready_write)
    os.close(go_read)
    try:
        if os.read(ready_read, 1) == b"1":
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{pid}/{name}").write_text(f"0 0 {ID_RANGE}\n")
            os.write(go_write, b"1")
    except OSError as exc:  # the child sees no go-ahead and exits
        print(f"cannot map ids 0-{ID_RANGE - 1} into the user namespace: {exc}", file=sys.stderr)
    finally:
        os.close(go_write)
        os.close(ready_read)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: python -m {__spec__.name if __spec__ else 'hpcbundle_testbed.apptainer'} COMMAND [ARG...]")
    sys.exit(run_in_user_namespace(sys.argv[1:]))
