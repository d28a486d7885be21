"""The user's working directory, where every rank starts: read at the edge (the launching shell's, or
--workdir), carried into the runtime's words so relative data and checkpoint paths mean the same inside.

A runtime that starts the program elsewhere (pyxis: `/` of a read-only image; docker: the image's WORKDIR;
ch-run: `/` when the directory is not in the image) mounts it at the same path and starts the program there.
"""

from __future__ import annotations

from dataclasses import dataclass

FLAG_SOURCE = "flag --workdir"
SHELL_SOURCE = "the launching shell's working directory"
JOB_SOURCE = "the batch job's working directory (#SBATCH --chdir)"


@dataclass(frozen=True)
class WorkDir:
    """An absolute directory and where it came from (FLAG_SOURCE, SHELL_SOURCE or JOB_SOURCE), for --explain.

    >>> WorkDir("/home/user/project", FLAG_SOURCE).path
    '/home/user/project'
    """

    path: str
    source: str = SHELL_SOURCE

    @property
    def elsewhere(self) -> bool:
        """Whether the line may be run from another directory (--workdir): the launcher must then start
        the ranks in this one, where the runtime does not.

        >>> WorkDir("/w", FLAG_SOURCE).elsewhere, WorkDir("/w").elsewhere, WorkDir("/w", JOB_SOURCE).elsewhere
        (True, False, False)
        """
        return self.source == FLAG_SOURCE
