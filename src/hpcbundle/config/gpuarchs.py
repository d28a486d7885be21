"""GPU architectures (compute capabilities): parsed once from a recipe or a label, each tool's spelling
rendered by a named method.

A recipe lists `gpu.archs: ["7.0", "8.0"]`; the image label holds "7.0,8.0"; Horovod's build wants
"70,80" (HOROVOD_BUILD_CUDA_CC_LIST) and PyTorch's "7.0;8.0" (TORCH_CUDA_ARCH_LIST).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class GpuArch(NamedTuple):
    """One compute capability, e.g. GpuArch(8, 6) for "8.6" (an A40's, sm_86)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> GpuArch:
        """ "8.6" -> GpuArch(8, 6); a bare major means minor 0 ("9" -> GpuArch(9, 0))."""
        major, _, minor = text.partition(".")
        return cls(int(major), int(minor or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        """The digits nvcc and Horovod name it by: GpuArch(12, 0).sm == "120"."""
        return f"{self.major}{self.minor}"

    def runs_on(self, capability: GpuArch) -> bool:
        """Whether code built for this arch runs on a GPU of `capability`: same major, minor not above it."""
        return self.major == capability.major and self.minor <= capability.minor


class GpuArchs(tuple[GpuArch, ...]):
    """The archs an image is built for, in the recipe's order.

    >>> archs = GpuArchs.parse(["7.0", "8.0", "12.0"])
    >>> archs.label(), archs.horovod_cc_list(), archs.torch_list()
    ('7.0,8.0,12.0', '70,80,120', '7.0;8.0;12.0')
    >>> GpuArchs.from_label(archs.label()) == archs, GpuArchs.from_label("") == ()
    (True, True)
    """

    @classmethod
    def parse(cls, texts: Iterable[str]) -> GpuArchs:
        return cls(GpuArch.parse(text) for text in texts)

    @classmethod
    def from_label(cls, value: str) -> GpuArchs:
        """The archs an image's `gpu-archs` label holds (empty for a CPU image)."""
        return cls.parse(text for text in value.split(",") if text)

    def label(self, separator: str = ",") -> str:
        """The image label's spelling "7.0,8.0" (also how messages list them, with ", ")."""
        return separator.join(str(arch) for arch in self)

    def horovod_cc_list(self) -> str:
        """HOROVOD_BUILD_CUDA_CC_LIST's spelling: "70,80"."""
        return ",".join(arch.sm for arch in self)

    def torch_list(self) -> str:
        """TORCH_CUDA_ARCH_LIST's spelling: "7.0;8.0"."""
        return self.label(";")

    def running_on(self, capability: GpuArch) -> GpuArchs:
        """The archs whose code runs on a GPU of `capability`.

        >>> GpuArchs.parse(["8.0", "9.0"]).running_on(GpuArch(8, 6)).label()
        '8.0'
        """
        return GpuArchs(arch for arch in self if arch.runs_on(capability))
