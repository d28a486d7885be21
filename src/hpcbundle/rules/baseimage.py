"""Rules for the base image: the OS and the Python it ships (the image's venv uses that python3)."""

from __future__ import annotations

from ..config.fields import major_minor
from ..knowledge.compat import KnowledgeBase
from .engine import Facts, Verdict, rule


@rule("python-os", needs=("recipe",))
def python_os(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The venv uses the distribution's python3, so the recipe's python must be that one."""
    recipe = facts.recipe
    distro = kb.os_python.get(recipe.base.os)
    if distro is None:
        return Verdict("FAIL", f"no python known for {recipe.base.os}", "add it to compat.yaml os_python")
    if major_minor(recipe.python) != distro:
        return Verdict(
            "FAIL",
            f"{recipe.base.os} ships python {distro}, not {recipe.python}",
            f'set python: "{distro}" or change base.os',
        )
    return Verdict("PASS", f"{recipe.base.os} ships python {distro}")
