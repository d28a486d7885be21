"""Gather the facts `doctor` and `site detect` judge: the I/O edge, run on each node (bounded).

Every function here reads the machine (``ip -j addr``, /sys/class/infiniband, ``nvidia-smi``,
``mpirun --version``, runtime ``--version``, the image) and returns plain JSON-able data, the
facts the rules judge (src/hpcbundle/rules/); diagnose/fanout.py runs it on every node. Run on a node as::

    python3 -m hpcbundle.diagnose.probes facts --image /var/tmp/img --checksum \
        --runtimes '{"pyxis": ["srun", "--container-image"]}'                   # one JSON object
    python3 -m hpcbundle.diagnose.probes listen 10.77.0.2 --seconds 10            # prints {"port": N}
    python3 -m hpcbundle.diagnose.probes listen 0.0.0.0 --port 29500              # {"port": 29500} or {"error": ...}
    python3 -m hpcbundle.diagnose.probes connect 10.77.0.2:41234 --seconds 3      # {"10.77.0.2:41234": "ok"}
    python3 -m hpcbundle.diagnose.probes stopped [--kill PID] -- python train.py  # {"stopped": [{"pid": N, ...}]}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..knowledge.bind import BIND_NAME

MANIFEST = "etc/hpcbundle/manifest.json"
MANIFEST_BYTES = 1 << 20
"""The largest image manifest read (hpcbundle writes a few KiB)."""
_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _out(argv: list[str], timeout: float = 10.0) -> str | None:
    """stdout+stderr of a bounded command, or None when it is missing, fails to start or times out."""
    return _attempt(argv, timeout)[0]


def _attempt(argv: list[str], timeout: float = 10.0) -> tuple[str | None, str]:
    """(stdout+stderr, "") of a bounded command, or (None, why it gave nothing)."""
    command = f"`{shlex.join(argv)}`"
    if shutil.which(argv[0], path=_PATH) is None:
        return None, f"{argv[0]} is not on PATH"
    try:
        env = os.environ if "USER" in os.environ else {**os.environ, "USER": _user()}  # ch-run needs $USER
        res = quiet_run(argv, timeout, env=env)
    except OSError as exc:
        return None, f"{command} does not start: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return None, f"{command} gave no answer within {timeout:g} s"
    text = res.stdout + res.stderr
    if res.returncode:
        return None, f"{command} fails: {(text.strip().splitlines() or [f'exit {res.returncode}'])[-1]}"
    return text, ""


def quiet_run(argv: list[str], timeout: float, **options: Any) -> subprocess.CompletedProcess[str]:
    """`argv` run with no stdin and its output captured as text, bounded by `timeout` seconds: raises
    TimeoutExpired then, OSError when it does not start; `options` go to subprocess.run."""
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL, **options
    )


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def interfaces() -> list[dict[str, Any]]:
    """[{name, up, ipv4: [addr/len], kind}] from `ip -j addr` (up: operstate UP or UNKNOWN with UP flag)."""
    text = _out(["ip", "-j", "addr"]) or "[]"
    found = []
    for link in json.loads(text):
        flags = link.get("flags", [])
        up = link.get("operstate") == "UP" or (
            link.get("operstate") == "UNKNOWN" and "UP" in flags and "LOWER_UP" in flags
        )
        ipv4 = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"]
        found.append({"name": link["ifname"], "up": up, "ipv4": ipv4, "kind": link.get("link_type", "")})
    return found


def default_route_interface() -> str | None:
    text = _out(["ip", "-j", "route", "show", "default"])
    routes = json.loads(text) if text else []
    return routes[0].get("dev") if routes else None


def route_interface(address: str) -> str | None:
    """The interface this node would use to reach `address` (a host resolved like MPI resolves it)."""
    text = _out(["ip", "-j", "route", "get", address])
    routes = json.loads(text) if text else []
    return routes[0].get("dev") if routes else None


def infiniband() -> list[str]:
    root = Path("/sys/class/infiniband")
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def numa_memory(root: Path = Path("/sys/devices/system/node")) -> dict[str, int]:
    """NUMA node -> its MemTotal in kB, from each node's meminfo ({} where the kernel has no NUMA sysfs).

    A node with 0 kB has CPUs but no memory; KNL in cache mode shows node0 alone (MCDRAM is a cache).
    """
    found = {}
    for path in sorted(root.glob("node[0-9]*/meminfo")):
        match = re.search(r"MemTotal:\s+(\d+)\s*kB", path.read_text(encoding="utf-8", errors="replace"))
        if match:
            found[path.parent.name.removeprefix("node")] = int(match.group(1))
    return found


GPU_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader"]


def gpus() -> dict[str, Any]:
    """{'present', 'driver', 'gpus': [{'name', 'capability', 'memory_mib'}], 'note'} from nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return {"present": False, "driver": None, "gpus": [], "note": "nvidia-smi not found"}
    text = _out(GPU_QUERY)
    if text is None:
        return {"present": False, "driver": None, "gpus": [], "note": "nvidia-smi failed (no GPU or no driver)"}
    return parse_gpus(text)


def parse_gpus(text: str) -> dict[str, Any]:
    """The GPU facts from GPU_QUERY's output, one line per GPU (pure). Seen on an H100 host::

    >>> facts = parse_gpus("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB")
    >>> facts["driver"], facts["gpus"]
    ('580.159.04', [{'name': 'NVIDIA H100 80GB HBM3', 'capability': '9.0', 'memory_mib': 81559}])
    """
    rows = [[c.strip() for c in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    cards = []
    for row in rows:
        memory = re.match(r"^(\d+)\s*MiB$", row[3]) if len(row) > 3 else None
        cards.append(
            {
                "name": row[0],
                "capability": row[2] if len(row) > 2 and row[2] else None,
                "memory_mib": int(memory.group(1)) if memory else None,
            }
        )
    return {
        "present": bool(cards),
        "driver": rows[0][1] if rows and len(rows[0]) > 1 else None,
        "gpus": cards,
        "note": "" if cards else "nvidia-smi lists no GPU",
    }


GPU_BUS_QUERY = ["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"]


def gpu_numa(devices: Path = Path("/sys/bus/pci/devices")) -> dict[str, Any]:
    """{'nodes': NUMA node of each GPU in index order (None: the kernel does not say), 'note'}:
    nvidia-smi's PCI bus ids, then each device's numa_node in sysfs."""
    text = _out(GPU_BUS_QUERY) if shutil.which("nvidia-smi") else None
    if text is None:
        return {"nodes": [], "note": "nvidia-smi not found or failed: no GPU to place"}
    nodes: list[int | None] = []
    for bus_id in sysfs_bus_ids(text):
        try:
            value = (devices / bus_id / "numa_node").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            value = ""
        nodes.append(int(value) if re.fullmatch(r"[0-9]{1,4}", value) else None)
    return {"nodes": nodes, "note": "" if nodes else "nvidia-smi lists no GPU"}


CPU_SIBLINGS = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")


def threads_per_core(siblings: Path = CPU_SIBLINGS) -> dict[str, Any]:
    """{'threads': hardware threads of CPU 0's core (None: unknown), 'evidence'}: the kernel's thread siblings
    list, else lscpu's `Thread(s) per core`."""
    try:
        count = cpu_list_length(siblings.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError):
        count = None
    if count:
        return {"threads": count, "evidence": str(siblings)}
    text = _out(["lscpu"]) or ""
    match = re.search(r"^Thread\(s\) per core:\s*([0-9]{1,2})\s*$", text, re.MULTILINE)
    return {"threads": int(match.group(1)), "evidence": "lscpu"} if match else {"threads": None, "evidence": ""}


def cpu_list_length(text: str) -> int | None:
    """The CPUs a kernel CPU list names ('0,112' or '0-1'), None for anything else.

    >>> cpu_list_length("0,112\\n"), cpu_list_length("4-7"), cpu_list_length("x")
    (2, 4, None)
    """
    count = 0
    for part in text.strip().split(","):
        match = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", part)
        if not match:
            return None
        count += int(match.group(2) or match.group(1)) - int(match.group(1)) + 1
    return count if 0 < count <= 64 else None


def gpu_topology() -> str | None:
    """`nvidia-smi topo -m`'s matrix (diagnose/topo.py reads it), None without nvidia-smi."""
    return _out(["nvidia-smi", "topo", "-m"]) if shutil.which("nvidia-smi") else None


def sysfs_bus_ids(text: str) -> list[str]:
    """GPU_BUS_QUERY's bus ids as sysfs names them (4-digit domain, lower case); others are left out.

    >>> sysfs_bus_ids("00000000:07:00.0\\n00000000:C4:00.0\\n")
    ['0000:07:00.0', '0000:c4:00.0']
    """
    found = []
    for line in text.splitlines():
        match = re.fullmatch(r"\s*[0-9A-Fa-f]{4}([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*", line)
        if match:
            found.append(match.group(1).lower())
    return found


def host_mpi() -> dict[str, Any] | None:
    """{'flavour', 'version', 'evidence'} from `mpirun --version` (or mpiexec), None when absent."""
    for command in ("mpirun", "mpiexec"):
        text = _out([command, "--version"])
        if not text:
            continue
        first = text.strip().splitlines()[0]
        patterns = (
            ("openmpi", r"Open MPI\)?\s+v?(\d+(?:\.\d+)+)"),
            ("intelmpi", r"Intel\(R\) MPI Library.*?(\d{4}(?:\.\d+)*)"),
            ("mvapich2", r"MVAPICH2?\D*(\d+(?:\.\d+)+)"),
            ("mpich", r"Version:\s+(\d+(?:\.\d+)+)"),
        )
        for flavour, pattern in patterns:
            match = re.search(pattern, text)
            if match:
                return {"flavour": flavour, "version": match.group(1), "evidence": f"`{command} --version`: {first}"}
        return {"flavour": "unknown", "version": "", "evidence": f"`{command} --version`: {first}"}
    return None


def runtimes(detection: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> what shows it is here, name -> why it is not) for each runtime of `detection`.

    `detection` (knowledge/launching.py's runtime_detection) maps a name to [command, option]: with no
    option the runtime is here when `command --version` answers (its first line is the evidence); with
    one, when `command --help` lists that option (pyxis: srun's plugin, whose options srun --help shows).
    """
    found, missing = {}, {}
    for name, (command, option) in detection.items():
        text, why = _attempt([command, "--help" if option else "--version"])
        if text is None:
            missing[name] = why
        elif not option:
            found[name] = (text.strip().splitlines() or [f"{command} --version"])[0]
        elif re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
            found[name] = f"`{command} --help` lists {option}"
        else:
            missing[name] = f"`{command} --help` lists no {option}"
    return found, missing


def slurm() -> dict[str, Any]:
    """Whether SLURM is here: sinfo on PATH, the default partition, and an allocation in the environment."""
    text = _out(["sinfo", "-h", "-o", "%P"], timeout=10) if shutil.which("sinfo") else None
    partitions = text.split() if text else []
    default = next(
        (p.rstrip("*") for p in partitions if p.endswith("*")), partitions[0].rstrip("*") if partitions else None
    )
    return {"sinfo": shutil.which("sinfo") is not None, "partition": default, "job": os.environ.get("SLURM_JOB_ID")}


def image(path: str | None, checksum: bool, hash_seconds: float = 60.0) -> dict[str, Any] | None:
    """Whether the image exists here, its kind, its sha256 (when asked; hashing stops after
    `hash_seconds`) and its manifest (directory images, SIF files)."""
    if not path:
        return None
    target = Path(path)
    if not os.path.exists(path):  # also a name too long or a symlink loop (Path.exists raises on those)
        looks_named = "/" not in path and not path.endswith((".sif", ".sqfs", ".simg"))
        return {"path": path, "exists": False, "kind": "name" if looks_named else "missing"}
    if not target.is_dir() and not target.is_file():  # a FIFO would block the read, /dev/zero never end
        return {"path": path, "exists": True, "kind": "special", "damaged": "a FIFO, device or socket, not an image"}
    info: dict[str, Any] = {
        "path": path,
        "exists": True,
        "kind": "dir" if target.is_dir() else "sif" if path.endswith(".sif") or _is_sif(target) else "file",
        "manifest": None,
    }
    manifest = target / MANIFEST
    if target.is_dir():
        try:
            if not manifest.is_file() or manifest.stat().st_size > MANIFEST_BYTES:
                raise ValueError(f"not a regular file of at most {MANIFEST_BYTES} bytes")
            info["manifest"] = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            info["manifest_error"] = f"{manifest}: {exc}"
    elif info["kind"] == "sif":
        try:
            info |= sif_contents(target)
        except SifDamaged as exc:
            info["damaged"] = str(exc)
    if checksum:
        deadline = time.monotonic() + hash_seconds
        try:
            info["sha256"] = _sha256_tree(target, deadline) if target.is_dir() else _sha256_file(target, deadline)
        except TimeoutError:
            info["sha256_error"] = f"hashing stopped after {hash_seconds:g} s"
        except OSError as exc:
            info["sha256_error"] = f"hashing failed: {exc.strerror or exc}"
    return info


# --------------------------------------------------------------------------- SIF files
# The SIF layout (github.com/apptainer/sif, pkg/sif): a global header, then fixed-size data object
# descriptors (little-endian, packed); the system partition holds the image's SquashFS.
SIF_MAGIC = b"SIF_MAGIC\0"
SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")  # launch, magic, version, arch, id; times, descriptors, data
SIF_DESCRIPTOR = struct.Struct("<i?3I7q128s384s")  # type, used, ids, offset, size, ..., name, extra
SIF_PARTITION, SIF_JSON_METADATA = 0x4004, 0x4006  # inspect's labels live in the JSON metadata object
SIF_PRIMARY_SYSTEM, SIF_SQUASHFS = 2, 1  # a partition's extra: fstype, parttype
SQUASHFS_MAGIC = b"hsqs"


class SifDamaged(ValueError):
    """A SIF file whose layout does not hold: not SIF, truncated, or its parts unreadable."""


def _is_sif(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(SIF_HEADER.size)[32:42] == SIF_MAGIC
    except OSError:
        return False


def sif_contents(path: Path) -> dict[str, Any]:
    """A SIF's labels (its JSON metadata, as `apptainer inspect --labels` shows them) and manifest
    (`unsquashfs -cat` at the system partition's offset), read without starting the image; every data
    object must lie inside the file (a truncated copy raises SifDamaged)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.read(SIF_HEADER.size)
        if len(header) < SIF_HEADER.size or header[32:42] != SIF_MAGIC:
            raise SifDamaged(f"no SIF header ({size} bytes)")
        count, table = SIF_HEADER.unpack(header)[8:10]
        end = table + count * SIF_DESCRIPTOR.size
        if count < 0 or table < 0 or end > size:
            raise SifDamaged(f"truncated: its descriptors end at byte {end}, the file has {size}")
        handle.seek(table)
        raw = handle.read(end - table)
        info: dict[str, Any] = {"labels": {}, "manifest": None}
        system = None
        for index in range(count):
            kind, used, ident, _group, _link, offset, length = SIF_DESCRIPTOR.unpack_from(
                raw, index * SIF_DESCRIPTOR.size
            )[:7]
            extra = raw[index * SIF_DESCRIPTOR.size + 201 : (index + 1) * SIF_DESCRIPTOR.size]
            if not used:
                continue
            if offset < 0 or length < 0 or offset + length > size:
                raise SifDamaged(f"truncated: data object {ident} ends at byte {offset + length}, the file has {size}")
            handle.seek(offset)
            if kind == SIF_JSON_METADATA:
                info["labels"] = _sif_labels(handle.read(length), ident)
            elif kind == SIF_PARTITION and struct.unpack_from("<ii", extra)[1] == SIF_PRIMARY_SYSTEM:
                system = (offset, length, struct.unpack_from("<i", extra)[0], handle.read(48))
    if system is None:
        raise SifDamaged("no system partition")
    offset, length, fstype, superblock = system
    if fstype != SIF_SQUASHFS:
        return info | {"manifest_error": f"{path}: its system partition is not SquashFS (fstype {fstype})"}
    if len(superblock) < 48 or superblock[:4] != SQUASHFS_MAGIC or struct.unpack_from("<q", superblock, 40)[0] > length:
        raise SifDamaged(f"its system partition at byte {offset} is no whole SquashFS")
    text, why = _attempt(["unsquashfs", "-o", str(offset), "-cat", str(path), MANIFEST])
    try:
        info["manifest"] = json.loads(text) if text is not None else None
    except ValueError as exc:
        why = f"/{MANIFEST} in {path}: {exc}"
    if info["manifest"] is None:
        info["manifest_error"] = why
    return info


def _sif_labels(data: bytes, ident: int) -> dict[str, str]:
    """The labels of a SIF's JSON metadata object: {"data": {"attributes": {"labels": {...}}}}."""
    try:
        labels = json.loads(data)["data"]["attributes"]["labels"] or {}
    except (ValueError, KeyError, TypeError) as exc:
        raise SifDamaged(f"its JSON metadata (data object {ident}) is unreadable: {exc}") from None
    return {str(key): str(value) for key, value in labels.items()}


def _sha256_file(path: Path, deadline: float) -> str:
    """sha256 of a file, read in 1 MiB blocks; TimeoutError once past `deadline` (time.monotonic)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            if time.monotonic() > deadline:
                raise TimeoutError(path)
            digest.update(block)
    return digest.hexdigest()


def _sha256_tree(root: Path, deadline: float) -> str:
    """One digest over a directory image: relative paths, link targets and file contents, in order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix().encode()
        if path.is_symlink():
            digest.update(b"L" + rel + b"\0" + os.readlink(path).encode() + b"\0")
        elif path.is_file():
            digest.update(b"F" + rel + b"\0" + _sha256_file(path, deadline).encode())
        elif path.is_dir():
            digest.update(b"D" + rel + b"\0")
    return digest.hexdigest()


def facts(
    image_path: str | None = None,
    checksum: bool = False,
    detection: dict[str, list[str]] | None = None,
    hash_seconds: float = 60.0,
) -> dict[str, Any]:
    """Everything the per-node checks need, as one JSON-able mapping; `detection`: the runtimes to look for."""
    found, missing = runtimes(detection or {})
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count() or 1,
        "threads_per_core": threads_per_core(),
        "uid": os.geteuid(),
        "interfaces": interfaces(),
        "infiniband": infiniband(),
        "numa": numa_memory(),
        "gpu": gpus(),
        "gpu_numa": gpu_numa(),
        "bind": shutil.which(BIND_NAME),
        "mpi": host_mpi(),
        "runtimes": found,
        "runtimes_missing": missing,
        "image": image(image_path, checksum, hash_seconds),
    }


# --------------------------------------------------------------------------- TCP reachability
def listen(address: str, seconds: float, expect: int = 0, port: int = 0) -> None:
    """Listen on `address`:`port` (0: an ephemeral port), print {"port": N}, accept for `seconds` (or `expect`
    connections); print {"error": why} when the port cannot be had ('Address already in use').

    SO_REUSEADDR, as torch's TCP store sets it: a port left in TIME_WAIT by an earlier job is free, one that
    another socket listens on is not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((address, port))
            server.listen(64)
        except OSError as exc:
            print(json.dumps({"error": exc.strerror or str(exc)}), flush=True)
            return
        print(json.dumps({"port": server.getsockname()[1]}), flush=True)
        end, accepted = time.monotonic() + seconds, 0
        while (not expect or accepted < expect) and (left := end - time.monotonic()) > 0:
            server.settimeout(left)
            try:
                conn, _ = server.accept()
            except (TimeoutError, socket.timeout):
                break
            with conn:
                conn.sendall(b"hpcbundle\n")
            accepted += 1


def connect(targets: list[str], seconds: float) -> dict[str, str]:
    """Try a TCP connection to each ADDR:PORT, at most `seconds` each (in parallel); 'ok' or the error."""
    from concurrent.futures import ThreadPoolExecutor

    def one(target: str) -> str:
        addr, port = target.rsplit(":", 1)
        try:
            with socket.create_connection((addr, int(port)), timeout=seconds) as conn:
                conn.settimeout(seconds)
                return "ok" if conn.recv(16).startswith(b"hpcbundle") else "no greeting"
        except (TimeoutError, socket.timeout):
            return f"timed out (no answer within {seconds:g} s)"
        except OSError as exc:
            return exc.strerror or str(exc)

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        return dict(zip(targets, pool.map(one, targets), strict=True))


# Process states (/proc/PID/stat) in which a rank neither runs nor waits for its peers.
STOPPED_STATES = {
    "T": "stopped (SIGSTOP, or a job-control stop)",
    "t": "stopped by a debugger",
    "D": "in uninterruptible sleep (a hung device or file system)",
}


def stopped_ranks(program: list[str], proc: Path = Path("/proc")) -> list[dict[str, Any]]:
    """This node's processes running `program` (the ranks: launchers and wrappers exec into it) that
    are in a STOPPED_STATES state: [{"pid": N, "state": "T"}, ...]. A rank's arguments are the
    program's; its executable may be named longer or by its full path (`python` runs as
    /usr/bin/python3.11 through a shim or a link); torchrun's workers run it as `PYTHON -u SCRIPT ARGS`.

    A node's processes are those in this probe's network namespace: ranks share their node's
    network (every runtime here runs with the host's), and nodes that share one kernel (namespace
    test clusters) still have one network namespace each.
    """
    name, arguments = os.path.basename(os.fsencode(program[0])), [os.fsencode(word) for word in program[1:]]
    network = os.readlink(proc / "self" / "ns" / "net")
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            here = os.readlink(entry / "ns" / "net") == network
        except (OSError, IndexError):
            continue  # gone meanwhile, or a kernel thread
        given = argv[1:] in (arguments, [b"-u", *arguments])
        ours = given and argv[:1] != [] and os.path.basename(argv[0]).startswith(name)
        if ours and here and state in STOPPED_STATES:
            found.append({"pid": int(entry.name), "state": state})
    return found


def kill_stopped(program: list[str], pids: list[int], proc: Path = Path("/proc")) -> list[dict[str, Any]]:
    """Those of `pids` that are still ranks of `program` stopped here (stopped_ranks), SIGKILLed: the ranks a
    stalled job's launcher could not end. torchrun's workers run in sessions of their own, so only their agent
    can end them, and its SIGTERM waits while a worker is stopped; the launcher kills the agent first."""
    found = [rank for rank in stopped_ranks(program, proc) if rank["pid"] in pids]
    for rank in found:
        try:
            os.kill(rank["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended meanwhile
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hpcbundle.diagnose.probes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--image")
    f.add_argument("--checksum", action="store_true")
    f.add_argument("--hash-seconds", type=float, default=60.0, help="stop hashing the image after this long")
    f.add_argument("--runtimes", default="{}", help="JSON: runtime name -> [command, option its --help lists or '']")
    li = sub.add_parser("listen")
    li.add_argument("address")
    li.add_argument("--seconds", type=float, default=10.0)
    li.add_argument("--expect", type=int, default=0)
    li.add_argument("--port", type=int, default=0, help="the port to listen on (default: an ephemeral one)")
    co = sub.add_parser("connect")
    co.add_argument("targets", nargs="+")
    co.add_argument("--seconds", type=float, default=3.0)
    st = sub.add_parser("stopped")
    st.add_argument("--kill", type=int, action="append", help="SIGKILL this PID where it is one of them (repeat)")
    st.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.what == "stopped":
        program = args.program[1:] if args.program[:1] == ["--"] else args.program
        found = kill_stopped(program, args.kill) if args.kill else stopped_ranks(program)
        print(json.dumps({"stopped": found}))
    elif args.what == "facts":
        print(json.dumps(facts(args.image, args.checksum, json.loads(args.runtimes), args.hash_seconds)))
    elif args.what == "listen":
        listen(args.address, args.seconds, args.expect, args.port)
    else:
        print(json.dumps(connect(args.targets, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
