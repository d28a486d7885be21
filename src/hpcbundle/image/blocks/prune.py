"""What only building needs, dropped from the venv before the runtime stage copies it."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class Prune(Block):
    """Removes the frameworks' C++ headers (Horovod was compiled against them), PyTorch's C++ test
    binaries and, for gpu.source: wheels, the CUDA compiler wheels.

    Parameters: `frameworks`, `gpu.source`.

    Example (recipe cpu-local)::

        rm -rf /opt/venv/lib/python3.11/site-packages/tensorflow/include
        rm -rf /opt/venv/lib/python3.11/site-packages/torch/include /opt/venv/lib/python3.11/site-packages/torch/test
        rm -f /opt/venv/lib/python3.11/site-packages/torch/bin/test_*
        du -sh /opt/venv
    """

    name, position = "prune", 80
    shell = ("prune",)

    def slim(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        return (Snippet("drop what only building needs from the venv", "prune"),)
