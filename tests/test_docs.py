"""The README and the docs/ pages hold together: every relative link points at a file that exists
(and at a heading of it, where it names one), and the README's table of contents reaches every page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT, readme_workflow_lines

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def unfenced(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links are links."""
    return re.sub(r"`[^`\n]*`", "", unfenced(text))


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as '-',
    a repeated one numbered (`-1`, `-2`).

    >>> sorted(anchors(ROOT / "docs" / "images.md"))[:2]
    ['building-images', 'gpu-stacks-cuda-from-pypis-nvidia-wheels']
    """
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", unfenced(page.read_text(encoding="utf-8")), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page: Path):
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert broken == [], "\n".join(broken)


def test_the_readmes_table_of_contents_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    contents = readme[readme.index("## Contents") : readme.index("\n## ", readme.index("## Contents") + 1)]
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in LINK.findall(contents)}
    unlinked = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p not in linked]
    assert unlinked == [], f"link these from the README's Contents: {unlinked}"


def test_the_readme_torch_lines_run_the_ddp_example_and_its_batch_line_writes_the_script(tmp_path: Path) -> None:
    """The README's `--torch` lines start examples/torch_train.py (the images ship examples/ at /examples; it
    runs for real under `launch --torch` in tests/test_torch_faults.py and, in the SIF, tests/test_sif_cluster.py).
    Its sbatch line, run by bash as written, writes job.sh: the head's address read on the job's first node,
    and srun starting the example under the shim."""
    lines = [line for line in readme_workflow_lines("hpcbundle ") if " --torch " in line]
    assert [line.split(" -- ")[1].split()[:2] for line in lines] == [["python", "/examples/torch_train.py"]] * 2
    (torchrun,) = [line for line in readme_workflow_lines("hpcbundle ") if " --torchrun " in line]
    shell = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "torchrun").mkdir()
    made = subprocess.run(
        ["bash", "-c", torchrun], cwd=tmp_path / "torchrun", env=shell, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    script = (tmp_path / "torchrun" / "job.sh").read_text()
    assert "#SBATCH --ntasks-per-node=1" in script and "HPCBUNDLE_RUN_ID=" in script, script
    assert (
        "hpcbundle-torchenv agent eth0 join_timeout=300 python -m torch.distributed.run --nnodes=2 "
        "--nproc-per-node=4 --rdzv-backend=c10d" in script
    ), script
    (sbatch,) = [line for line in lines if line.startswith("hpcbundle sbatch ")]
    shell = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    made = subprocess.run(["bash", "-c", sbatch], cwd=tmp_path, env=shell, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    script = (tmp_path / "job.sh").read_text()
    assert "MASTER_ADDR=$(ip -4 -o addr show dev eth0 scope global" in script, script
    assert "hpcbundle-torchenv slurm python /examples/torch_train.py --checkpoint ckpt.pt" in script, script
