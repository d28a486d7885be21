"""A small SIF for tests that read images as doctor does: the testbed's cached debootstrapped Debian as
a sandbox base, a %post that writes an hpcbundle manifest, and org.hpcbundle.* labels (about 20 s).

    sif = small_sif(ensure_apptainer(), tmp_dir, {"org.hpcbundle.mpi.version": "4.1.4"})
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

from .apptainer import build_argv
from .docker_engine.rootfs import debootstrap_tarball

MANIFEST = "/etc/hpcbundle/manifest.json"


def small_sif(apptainer: str, workdir: Path, labels: Mapping[str, str], timeout: float = 600) -> Path:
    """workdir/small.sif with `labels` as %labels and as the labels of its manifest; RuntimeError with the
    build's last output when it fails. The unpacked base is removed afterwards."""
    base = workdir / "base"
    base.mkdir()
    subprocess.run(["tar", "-C", str(base), "-xf", str(debootstrap_tarball().path)], check=True, timeout=300)
    manifest = json.dumps({"labels": dict(labels)})
    definition = workdir / "small.def"
    definition.write_text(
        f"Bootstrap: localimage\nFrom: {base}\n\n%post\n    mkdir -p {Path(MANIFEST).parent}\n"
        f"    cat > {MANIFEST} <<'EOF'\n{manifest}\nEOF\n\n%labels\n"
        + "".join(f"    {key} {value}\n" for key, value in labels.items())
    )
    sif = workdir / "small.sif"
    try:
        res = subprocess.run(build_argv(apptainer, sif, definition), capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if res.returncode or not sif.is_file():
        raise RuntimeError(f"apptainer build {sif} failed (exit {res.returncode}): {(res.stdout + res.stderr)[-1500:]}")
    return sif
