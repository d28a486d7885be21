"""The Jinja2 environment every generator renders its templates with (images, sbatch scripts).

It sits at the bottom floor beside `quoting`, so the image stage and the launch stage both reach it
without importing each other.
"""

from __future__ import annotations

from pathlib import Path

import jinja2


def strict_environment(templates_dir: Path) -> jinja2.Environment:
    """A Jinja2 environment over `templates_dir` that fails on any undefined name and escapes nothing
    (the output is shell and Dockerfile text; callers add the filters that quote it)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
