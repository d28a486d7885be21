"""Read each GPU's NUMA node from `nvidia-smi topo -m` (pure), for `site detect`'s node.gpu_numa.

The matrix has one row per GPU (then NICs) and, on the right, the columns "CPU Affinity",
"NUMA Affinity" and, from driver 535 on, "GPU NUMA ID". Columns are separated by tabs or runs of
spaces, and pasted outputs lose some separators ("NODENODE"), so the NUMA Affinity of a row is
read counting from the right, as far from the end as its header is. Drivers older than the NUMA
Affinity column print CPU Affinity only: then there is no map to draft.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config.limits import MAX_NUMA_NODE

_HEADER_CELL = re.compile(r"\t+| {2,}")
_GPU_ROW = re.compile(r"^GPU(\d{1,4})\s")


@dataclass(frozen=True)
class GpuNuma:
    """The map drafted from one output: `nodes[i]` is GPU i's NUMA node, or None with `why` when unknown."""

    nodes: tuple[int, ...] | None
    why: str


def parse_topo(text: str) -> GpuNuma:
    """GPU index -> NUMA node from `nvidia-smi topo -m` output::

    >>> parse_topo("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\n"
    ...            "GPU0\\t X \\tSYS\\t0-23\\t0\\t\\tN/A\\nGPU1\\tSYS\\t X \\t24-47\\t1\\t\\tN/A\\n").nodes
    (0, 1)
    """
    lines = text.splitlines()
    header = next((line for line in lines if "Affinity" in line), None)
    if header is None:
        return GpuNuma(None, "no topology matrix (no 'CPU Affinity' header) in the output")
    cells = [cell.strip() for cell in _HEADER_CELL.split(header.strip()) if cell.strip()]
    if "NUMA Affinity" not in cells:
        return GpuNuma(None, "this nvidia-smi prints no NUMA Affinity column (an older driver)")
    from_right = len(cells) - cells.index("NUMA Affinity")
    found: dict[int, int] = {}
    for line in lines:
        row = _GPU_ROW.match(line)
        if not row:
            continue
        words = line.split()
        value = words[-from_right] if len(words) > from_right else ""
        if not re.fullmatch(r"[0-9]{1,4}", value) or int(value) > MAX_NUMA_NODE:
            return GpuNuma(None, f"GPU{row.group(1)} has NUMA Affinity {value[:12]!r}, not a NUMA node number")
        found[int(row.group(1))] = int(value)
    if not found:
        return GpuNuma(None, "no GPU rows in the matrix")
    if sorted(found) != list(range(len(found))):
        return GpuNuma(None, f"GPU rows {sorted(found)} are not 0..{len(found) - 1}")
    return GpuNuma(tuple(found[index] for index in range(len(found))), "nvidia-smi topo -m, NUMA Affinity column")
