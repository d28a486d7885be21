"""Loading that refuses: a site or recipe of the right shape whose keys contradict each other is refused
by the rules that judge it (`on_load` rules), one `FILE: KEY: problem (fix)` line each, exit status 2.
A launch request is judged with its site by its LaunchPlan (launch/plan.py), in one pass; its own parts are
printed as `FLAG: problem (fix)`.

config/ validates the shape and knows no rule; every command loads through here (or through
hpcbundle.launch.load_site, which calls it), so a combination is judged in one place, the engine.
"""

from __future__ import annotations

from pathlib import Path

from ..config import recipes, sites
from ..config.errors import UserError, format_problem
from ..config.loading import named_file
from ..config.recipes import Recipe
from ..config.sites import Site
from ..knowledge.compat import knowledge_base
from .engine import Facts, Result, evaluate, registered


def load_failures(facts: Facts) -> list[Result]:
    """The FAILs of the on_load rules over `facts` (a site alone, or a recipe alone), in one engine pass."""
    on_load = {r.name for r in registered() if r.on_load}
    return [r for r in evaluate(facts, knowledge_base()) if r.status == "FAIL" and r.rule.split(" ", 1)[0] in on_load]


def refuse_failures(facts: Facts, where: str) -> None:
    """Raise every load FAIL as one UserError line `where: key: problem (fix)`, or `flag: problem (fix)` for a
    part of the launch request (nothing when none fails)."""
    failures = load_failures(facts)
    if failures:
        raise UserError(*(problem_line(r, where) for r in failures))


def problem_line(result: Result, where: str) -> str:
    """A FAIL as the one line a user acts on: at a key of the file `where`, or at a flag of the request."""
    return format_problem("" if result.flag else where, result.key, result.evidence, result.fix)


def refuse_site(site: Site) -> Site:
    """`site`, unless a rule refuses it (for sites built in code, not read from a file)."""
    refuse_failures(Facts(site=site), site.where)
    return site


def load_site(ref: str, sites_dir: Path) -> Site:
    """Load a site by name or path: its shape (config), then every load rule at once."""
    return refuse_site(sites.read_site(ref, sites_dir))


def read_recipe(ref: str, recipes_dir: Path) -> tuple[Recipe, str]:
    """A recipe by name or path, its shape validated (a command that judges it with everything else, once:
    check), and the file it came from."""
    path = named_file(ref, recipes_dir, "recipe")
    return recipes.read_recipe(str(path), recipes_dir), str(path)


def load_recipe(ref: str, recipes_dir: Path) -> Recipe:
    """Load a recipe by name or path: its shape (config), then every load rule at once."""
    recipe, where = read_recipe(ref, recipes_dir)
    refuse_failures(Facts(site=None, recipe=recipe), where)
    return recipe


def file_failures(results: list[Result], kinds: set[str]) -> list[Result]:
    """The FAILs among `results` of the load rules over one file alone (needing no facts beyond `kinds`): in a
    pass over a whole request they come first, as loading that file would have refused them."""
    rules = {r.name: r for r in registered()}
    alone = [r for r in results if r.status == "FAIL" and rules[r.rule.split(" ", 1)[0]].needs <= kinds]
    return [r for r in alone if rules[r.rule.split(" ", 1)[0]].on_load]


def all_recipes(recipes_dir: Path) -> list[Recipe]:
    """Every recipe in recipes/, sorted by name; any refused file is an error."""
    return [load_recipe(str(path), recipes_dir) for path in sorted(recipes_dir.glob("*.yaml"))]
