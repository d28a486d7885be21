"""What the benchmarks under bench/ share: their one-line option errors and argparse types, the spread of a
figure over rounds, and the namespace cluster's site, its hosts and `hpcbundle tune` on it (bench/allreduce.py
and bench/train.py measure on the same sites, tuned the same way)."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .cli import hpcbundle_argv
from .netns_cluster import NetnsCluster
from .sites import site_data, write_site


def hosts_of(cluster: NetnsCluster) -> str:
    return ",".join(f"{node}:1" for node in cluster.nodes)


def bench_site(
    directory: Path, cluster: NetnsCluster, name: str, env: dict[str, str], overrides: dict[str, str], timeout: int
) -> Path:
    """The testbed's namespace site for `cluster`, plus a variant's env and --set overrides."""
    data = site_data(name, cluster=cluster, interfaces=[NetnsCluster.DATA_IFACE], timeout=timeout)
    data["description"] = f"namespace cluster for bench/allreduce.py ({len(cluster.nodes)} nodes)"
    data["env"].update(
        {"GLOO_SOCKET_IFNAME": NetnsCluster.DATA_IFACE, "HOROVOD_GLOO_IFACE": NetnsCluster.DATA_IFACE, **env}
    )
    for key, value in overrides.items():
        section, _, name_ = key.partition(".")
        if section not in ("mca", "env") or not name_:
            raise SystemExit(f"--set {key}: only mca.NAME=VALUE and env.NAME=VALUE")
        if value == "":
            data[section].pop(name_, None)
            data["why"].pop(key, None)
        else:
            data[section][name_] = value
    return write_site(directory, data)


def run_tune(cluster: NetnsCluster, site: Path, out: Path, timeout: float) -> Path:
    """`hpcbundle tune` on node1 for `site`; returns the tuned site file (the one place that knows tune's flags)."""
    argv = hpcbundle_argv("tune", "--site", str(site), "--np", str(len(cluster.nodes)), "--hosts", hosts_of(cluster))
    argv += ["--python", sys.executable, "--no-doctor", "-o", str(out)]
    result = cluster.run("node1", argv, timeout=timeout)
    sys.stderr.write(result.stdout + result.stderr)
    if result.returncode or not out.is_file():
        raise SystemExit(f"bench/allreduce.py: hpcbundle tune failed (exit {result.returncode})")
    return out


def tuned_settings(base: Path, tuned: Path) -> dict[str, str]:
    """What tune changed, as --set pairs: every mca and env key whose value differs between the site
    tune started from and the one it wrote ("" where tune removed the key).

    {"mca.btl_tcp_links": "4", "env.HOROVOD_CYCLE_TIME": "0.1"} means tune kept 4 TCP links and a
    0.1 ms cycle; bench_site(..., overrides=that) gives another cluster of the same size the same site.
    """
    before, after = (yaml.safe_load(path.read_text()) for path in (base, tuned))
    changed: dict[str, str] = {}
    for section in ("mca", "env"):
        old: Mapping[str, Any] = before.get(section) or {}
        new: Mapping[str, Any] = after.get(section) or {}
        for name in sorted(old.keys() | new.keys()):
            if old.get(name) != new.get(name):
                changed[f"{section}.{name}"] = "" if name not in new else str(new[name])
    return changed


def spread(values: list[float]) -> dict[str, float]:
    """{'median', 'min', 'max'} of one figure's per-round values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is below 1")
    return value


class OneLineParser(argparse.ArgumentParser):
    """Bad options: one line naming the option and the fix, exit 2 (no usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see --help)\n")
