"""Run the probes on every node, bounded in time: through the site's plm_rsh_agent (as Open MPI would), else ssh.

`gather` asks each node for its facts (`python3 -m hpcbundle.diagnose.probes facts`) and runs a real TCP
probe between every pair of nodes over each named interface; what comes back is judged by the rules.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from ..knowledge.launching import runtime_detection
from .probes import facts, quiet_run

CONNECT_SECONDS = 3.0
"""How long a TCP probe waits for one connection before it calls the address unreachable."""


def remote_argv(mca: dict[str, str], host: str, words: list[str]) -> list[str]:
    """argv that runs `words` on `host`: through the site's plm_rsh_agent (as Open MPI would), else ssh.

    The agent and ssh get one shell-quoted command word, like Open MPI hands its agent.
    """
    if host in ("localhost", socket.gethostname()) and "plm_rsh_agent" not in mca:
        return list(words)
    agent = (
        shlex.split(mca["plm_rsh_agent"])
        if "plm_rsh_agent" in mca
        else ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    )
    return [*agent, host, shlex.join(words)]


def _self(environment: Mapping[str, str], *args: str) -> list[str]:
    """The probe module run by this Python, with `environment` set first (`env NAME=VALUE ...`)."""
    settings = [f"{name}={value}" for name, value in environment.items()]
    return [*(["env", *settings] if settings else []), sys.executable, "-m", "hpcbundle.diagnose.probes", *args]


# How reaching a node failed, from the agent's stderr (ssh's texts, which most rsh agents pass on):
# the first text found names the kind (name, no route, refused, timed out, auth, closed) and its likely cause.
UNREACHED = (
    ("Could not resolve hostname", "name does not resolve (a typo, or missing from DNS and /etc/hosts?)"),
    ("Name or service not known", "name does not resolve (a typo, or missing from DNS and /etc/hosts?)"),
    ("No route to host", "no route to host (node down or its link down?)"),
    ("Network is unreachable", "no route: network is unreachable (no link on this node to that network?)"),
    ("Connection refused", "connection refused (sshd down?)"),
    ("Permission denied", "auth: permission denied (no key the node accepts; BatchMode asks no password)"),
    ("Host key verification failed", "auth: host key verification failed (unknown or changed host key)"),
    ("Connection closed by", "connection closed by the node (sshd refused the session: MaxStartups, AllowUsers?)"),
    ("Connection reset by", "connection closed by the node (sshd refused the session: MaxStartups, AllowUsers?)"),
    ("timed out", "timed out connecting (node down, or a firewall drops the packets?)"),
)


def unreached(agent: str, status: int | None, stderr: str, timeout: float) -> str | None:
    """How the agent (ssh or the site's plm_rsh_agent) failed to reach the node, or None when it did
    (then the node's own command failed). `status` None: no answer within `timeout` s (pure)::

    >>> unreached("ssh", 255, "ssh: connect to host node2 port 22: Connection refused\\r\\n", 20)
    'ssh: connection refused (sshd down?)'
    >>> unreached("ssh", None, "", 20)
    'ssh: timed out (no answer within 20 s)'
    >>> unreached("ssh", 1, "python3: No module named hpcbundle", 20) is None
    True
    """
    if status is None:
        return f"{agent}: timed out (no answer within {timeout:g} s)"
    for text, failure in UNREACHED:
        if text.lower() in stderr.lower():
            return f"{agent}: {failure}"
    if status == 255:  # ssh's own failure: the remote command never ran
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        return f"{agent}: " + (lines[-1][:200] if lines else "exit 255 (could not connect)")
    return None


def _run_json(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run `argv` (a probe, through an agent or here) and return its last JSON line, or {'error': why};
    a node the agent did not reach also gets 'unreached' (the rules judge the others only)."""
    agent = None if argv[0] in ("env", sys.executable) else os.path.basename(argv[0])  # None: run here (_self)
    try:
        res = quiet_run(argv, timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        if agent is None:
            return {"error": f"no answer within {timeout:g} s"}
        return {"error": unreached(agent, None, "", timeout), "unreached": True}
    except OSError as exc:
        return {"error": f"{argv[0]}: {exc.strerror}"}
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    failure = unreached(agent, res.returncode, res.stderr, timeout) if agent and res.returncode else None
    if failure:
        return {"error": failure, "unreached": True}
    if res.returncode or not lines:
        tail = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        return {"error": f"probe failed: {tail}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"probe failed: not JSON: {lines[-1][:200]}"}


def gather(
    mca: dict[str, str],
    hosts: list[str],
    image_path: str | None,
    checksum: bool,
    interfaces_to_probe: list[str],
    timeout: float = 30.0,
    connect_seconds: float = CONNECT_SECONDS,
    environment: Mapping[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[tuple[str, str, str, str]]]]:
    """Facts from every host (or this one when `hosts` is empty) and a real TCP probe over each interface.

    `environment`: what the launch gives its ranks from the launching shell (the site's exports, e.g.
    PATH), set for the probes too, so they find the runtime where the ranks find it. Hashing the
    image may take two thirds of `timeout`. Returns (host -> facts or {'error'}, interface -> [(from,
    to, address, 'ok' or why)]); the TCP probe runs between the nodes that answered.
    """
    environment = environment or {}
    detection = runtime_detection()
    hash_seconds = timeout * 2 / 3
    words = ["facts", *(["--image", image_path] if image_path else []), *(["--checksum"] if checksum else [])]
    words += ["--runtimes", json.dumps(detection), "--hash-seconds", f"{hash_seconds:g}"]
    if not hosts:
        return {socket.gethostname(): facts(image_path, checksum, detection, hash_seconds)}, {}
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        found = dict(
            zip(
                hosts,
                pool.map(lambda h: _run_json(remote_argv(mca, h, _self(environment, *words)), timeout), hosts),
                strict=True,
            )
        )
    reach: dict[str, list[tuple[str, str, str, str]]] = {}
    answered = {host: node for host, node in found.items() if "error" not in node}  # the mesh joins these
    if len(answered) > 1:
        for name in interfaces_to_probe:
            addrs = {}
            for host, node in answered.items():
                link = next(
                    (i for i in node.get("interfaces", []) if i["name"] == name and i["up"] and i["ipv4"]), None
                )
                if link:
                    addrs[host] = link["ipv4"][0].split("/")[0]
            if len(addrs) == len(answered):
                reach[name] = _tcp_mesh(mca, addrs, connect_seconds, timeout, environment)
    return found, reach


def stopped_ranks(
    mca: dict[str, str],
    hosts: Mapping[str, list[int]],
    program: list[str],
    environment: Mapping[str, str],
    timeout: float = 10.0,
) -> dict[str, list[dict[str, Any]]]:
    """Host -> its ranks of `program` that are stopped or stuck in the kernel (probes.stopped_ranks), asked
    in parallel; where `hosts` lists PIDs for a host, only those, and they are SIGKILLed (probes.kill_stopped).
    A host that does not answer within `timeout` s is left out."""

    def ask(host: str) -> dict[str, Any]:
        kills = [word for pid in hosts[host] for word in ("--kill", str(pid))]
        return _run_json(remote_argv(mca, host, _self(environment, "stopped", *kills, "--", *program)), timeout)

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        answers = pool.map(ask, hosts)
        return {host: answer["stopped"] for host, answer in zip(hosts, answers, strict=True) if answer.get("stopped")}


def _tcp_mesh(
    mca: dict[str, str], addrs: dict[str, str], seconds: float, timeout: float, environment: Mapping[str, str]
) -> list[tuple[str, str, str, str]]:
    """Listen on each host's address, connect from every other host; bounded by `seconds` per connection."""
    listeners: dict[str, subprocess.Popen] = {}
    ports: dict[str, str] = {}
    results: list[tuple[str, str, str, str]] = []
    try:
        for host, addr in addrs.items():
            listeners[host] = _listener(
                mca, host, environment, addr, "--seconds", str(timeout), "--expect", str(len(addrs) - 1)
            )
        deadline = time.monotonic() + timeout
        for host, proc in listeners.items():
            listening = _listening(proc, deadline)
            if "port" in listening:
                ports[host] = f"{addrs[host]}:{listening['port']}"
            else:
                results += [
                    (other, host, addrs[host], f"could not listen on {addrs[host]}") for other in addrs if other != host
                ]

        def from_host(src: str) -> list[tuple[str, str, str, str]]:
            targets = {dst: p for dst, p in ports.items() if dst != src}
            if not targets:
                return []
            answer = _connect(mca, src, list(targets.values()), seconds, timeout, environment)
            return [
                (src, dst, addrs[dst], answer.get(p, answer.get("error", "no result"))) for dst, p in targets.items()
            ]

        with ThreadPoolExecutor(max_workers=len(addrs)) as pool:
            for part in pool.map(from_host, list(addrs)):
                results += part
    finally:
        for proc in listeners.values():
            _kill(proc)
    return results


def head_store(
    mca: dict[str, str],
    head: tuple[str, str, int],
    sources: list[str],
    seconds: float,
    timeout: float,
    environment: Mapping[str, str],
) -> tuple[str, dict[str, str]]:
    """Whether a torch job's store could listen on `head` (host, its address, port) and every host of `sources`
    reach it: a listener on the host on every address (as torch's store binds) at that port, a connection from
    each source to address:port, bounded by `seconds` each.

    Returns ('ok' or why the port could not be had, source -> 'ok' or why its connection failed).
    """
    host, address, port = head
    proc = _listener(
        mca, host, environment, "0.0.0.0", "--port", str(port), "--seconds", str(timeout), "--expect", str(len(sources))
    )
    try:
        listening = _listening(proc, time.monotonic() + timeout)
        if "port" not in listening:
            return listening["error"], {}
        target = f"{address}:{port}"
        with ThreadPoolExecutor(max_workers=max(1, len(sources))) as pool:
            answers = pool.map(lambda src: _connect(mca, src, [target], seconds, timeout, environment), sources)
            return "ok", {
                src: answer.get(target, answer.get("error", "no result"))
                for src, answer in zip(sources, answers, strict=True)
            }
    finally:
        _kill(proc)


def _listener(mca: dict[str, str], host: str, environment: Mapping[str, str], *args: str) -> subprocess.Popen:
    """The listen probe started on `host` with `args` (its address and options); its first line says its port."""
    return subprocess.Popen(
        remote_argv(mca, host, _self(environment, "listen", *args)),  # noqa: S603
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _listening(proc: subprocess.Popen, deadline: float) -> dict[str, Any]:
    """A listener's first line: {"port": N}, or {"error": why} (the port taken, no answer by `deadline`)."""
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    try:
        return json.loads(line) if line.startswith("{") else {"error": "the listener gave no port"}
    except ValueError:
        return {"error": f"the listener gave no port: {line[:200]}"}


def _connect(
    mca: dict[str, str], src: str, targets: list[str], seconds: float, timeout: float, environment: Mapping[str, str]
) -> dict[str, Any]:
    """ADDR:PORT -> 'ok' or why, for a TCP connection from `src` to each of `targets` ({'error'} when `src` fails)."""
    return _run_json(
        remote_argv(mca, src, _self(environment, "connect", *targets, "--seconds", str(seconds))), seconds + timeout
    )


def _kill(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(2)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
