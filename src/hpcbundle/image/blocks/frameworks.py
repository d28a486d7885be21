"""The frameworks' wheels (TensorFlow, PyTorch), with the CUDA toolkit wheels where CUDA comes from PyPI."""

from __future__ import annotations

from ...config.recipes import Recipe
from ...knowledge.compat import KnowledgeBase
from ...knowledge.stack import stack_pins
from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


def framework_requirements(recipe: Recipe, kb: KnowledgeBase) -> tuple[str, ...]:
    """The frameworks' exact pins, e.g. ('tensorflow-cpu==2.15.1', 'torch==2.13.0+cpu') for cpu-local."""
    return tuple(pin for name, (pin, _) in stack_pins(recipe, kb).items() if name != "horovod")


@BLOCKS.register
class Frameworks(Block):
    """pip installs the frameworks and, for gpu.source: wheels, the CUDA toolkit wheels (nvcc, runtime, headers).

    torchvision (and torchaudio where the recipe names it) goes in the same pip call as torch, with torch's
    wheel variant, so pip resolves them together. On a base that freezes its packages (NGC's
    /etc/pip/constraint.txt) pip installs against that file, so the base's torch is never replaced.

    The install script may be given a toolkit already on the host (HPCBUNDLE_CUDA_HOME): there the
    toolkit wheels go in a line of their own, run only without one; an image always installs them.

    Parameters: `frameworks.tensorflow` (version, package), `frameworks.pytorch` (version, variant,
    torchvision, torchaudio), `gpu.source`, `gpu.cuda`.

    Example (recipe cpu-local)::

        if [ -f "/etc/pip/constraint.txt" ]; then frozen="/etc/pip/constraint.txt"; else frozen=""; fi
        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse ${frozen:+-c "$frozen"} \\
            tensorflow-cpu==2.15.1 torch==2.13.0+cpu
    """

    name, position = "frameworks", 50
    shell = ("pip",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        toolkit = spec.cuda_tree.requirements if spec.cuda_tree else ()
        separate = toolkit if spec.layout.host else ()
        gpu = spec.recipe.gpu
        title = "frameworks" + (f" and the CUDA {gpu.cuda} toolkit wheels" if toolkit and gpu else "")
        values = {
            "requirements": (*framework_requirements(spec.recipe, spec.kb), *(() if separate else toolkit)),
            "toolkit": separate,
            "frozen": True,
        }
        return (Snippet(title, "pip", values),)
