"""Which variable names carry secrets, and how a site's variables reach the ranks without their values on a line.

A name looks secret when one of its words (split at `_`) is a secret's word: HF_TOKEN, WANDB_API_KEY,
AWS_SECRET_ACCESS_KEY, DB_PASSWORD, GOOGLE_APPLICATION_CREDENTIALS. Words that only contain one are not:
NCCL_IB_PKEY and UCX_IB_PKEY (an InfiniBand partition key, a plain number) stay settings.

    >>> [secret_name(n) for n in ("HF_TOKEN", "WANDB_API_KEY", "NCCL_IB_PKEY", "NCCL_SOCKET_IFNAME")]
    [True, True, False, False]
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Mapping

from ..config.sites import Site
from .launching import LAUNCHERS_KNOWN

SECRET_WORDS = frozenset(
    {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "APIKEY"}
)
"""Words of a variable's name that make it a secret's (whole words: PKEY, a partition key, is none)."""


def secret_name(name: str) -> bool:
    """Whether variable `name` looks like it holds a secret (a token, key, password or credential)."""
    return any(word in SECRET_WORDS for word in name.upper().split("_"))


def secret_env(site: Site) -> list[str]:
    """The site's env: names that look secret: forwarded by name from the launching shell, their values never
    written (rule secret-env says why)."""
    return [name for name in site.env if secret_name(name)]


def forwarded(site: Site) -> list[tuple[str, str]]:
    """(key, name) of every variable forwarded by name from the launching shell: export[i], then env.NAME of
    each secret-looking env: name."""
    return [(f"export[{i}]", name) for i, name in enumerate(site.export)] + [
        (f"env.{name}", name) for name in secret_env(site)
    ]


def settings(site: Site) -> dict[str, str]:
    """The site's env: whose values may be written on a line: every name but the secret-looking ones."""
    return {name: value for name, value in site.env.items() if not secret_name(name)}


HOROVODRUN_KEEPS = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_*",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "SSH_AUTH_SOCK",
    "SLURM_*",
    "HOROVOD_*",
    "APPTAINER*",
    "SINGULARITY*",
)
"""What horovodrun --gloo and its job need of the launching shell: the paths to the tools, the locale, the ssh
agent it reaches the nodes with, the SLURM job its discovery script asks about, Horovod's own settings and the
container runtime's (shell `case` patterns)."""


def horovodrun_allowlist(site: Site) -> list[str] | None:
    """The launching shell's variables kept exported for horovodrun --gloo (env_on_ssh_lines in its row), which
    writes every exported variable onto each ssh command line it runs (Horovod's runner/gloo_run.py drops only
    BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_DEVICES and its own _HOROVOD_SECRET_KEY), readable through `ps` on every
    node: HOROVODRUN_KEEPS and the names the site forwards; None for any other launcher (it forwards by name, or
    not at all)."""
    known = LAUNCHERS_KNOWN.get(site.launcher.name)
    if known is None or not known.env_on_ssh_lines or not site.launcher.gloo:
        return None
    return [*HOROVODRUN_KEEPS, *(name for _, name in forwarded(site) if name not in HOROVODRUN_KEEPS)]


def kept_environment(environ: Mapping[str, str], allowlist: list[str]) -> dict[str, str]:
    """The variables of `environ` whose names match a pattern of `allowlist` (shell `case` patterns).

    >>> kept_environment({"PATH": "/bin", "LC_ALL": "C", "AWS_SECRET_ACCESS_KEY": "x"}, ["PATH", "LC_*"])
    {'PATH': '/bin', 'LC_ALL': 'C'}
    """
    return {name: value for name, value in environ.items() if any(fnmatchcase(name, p) for p in allowlist)}
