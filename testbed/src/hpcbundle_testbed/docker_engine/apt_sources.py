"""The machine's apt sources (sources.list, *.list and deb822 *.sources): the mirror debootstrap
fetches from, and the entries the base image gets, all read at run time."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .host import EngineError


@dataclass(frozen=True)
class AptSource:
    """One `deb` entry of the machine's apt configuration."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None = None

    def line(self) -> str:
        """The entry as a one-line sources.list entry."""
        opts = f"[signed-by={self.signed_by}] " if self.signed_by else ""
        return f"deb {opts}{self.uri} {self.suite} {' '.join(self.components)}"


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every enabled `deb` entry in sources.list, sources.list.d/*.list and *.sources (deb822)."""
    found: list[AptSource] = []
    lists = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for raw in path.read_text(errors="replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            m = re.match(r"^deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
            if not m:
                continue
            opts = dict(o.split("=", 1) for o in (m.group(1) or "").split() if "=" in o)
            found.append(AptSource(m.group(2), m.group(3), tuple(m.group(4).split()), opts.get("signed-by")))
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            key = None
            for raw in stanza.splitlines():
                if raw.startswith("#") or not raw.strip():
                    continue
                if raw[0].isspace() and key:  # continuation line
                    fields[key] += " " + raw.strip()
                    continue
                key, _, value = raw.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    found.append(
                        AptSource(
                            uri, suite, tuple(fields.get("components", "").split()), fields.get("signed-by") or None
                        )
                    )
    return found


def host_mirror(suite: str, etc_apt: Path = Path("/etc/apt")) -> str:
    """The URI this machine's apt uses for `suite` main: what debootstrap should fetch from.
    ``$HPCBUNDLE_DEBIAN_MIRROR`` overrides it (a machine whose own apt is not Debian `suite`)."""
    if os.environ.get("HPCBUNDLE_DEBIAN_MIRROR"):
        return os.environ["HPCBUNDLE_DEBIAN_MIRROR"]
    for src in apt_sources(etc_apt):
        if src.suite == suite and "main" in src.components:
            return src.uri
    raise EngineError(
        f"no `deb <mirror> {suite} main` entry in {etc_apt}/sources.list(.d): set "
        f"HPCBUNDLE_DEBIAN_MIRROR to the Debian mirror this machine may use"
    )


def rootfs_sources(suite: str, etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """The machine's entries for `suite`, `suite`-updates and `suite`-security (main only)."""
    wanted = {suite, f"{suite}-updates", f"{suite}-security"}
    return [
        AptSource(s.uri, s.suite, ("main",), s.signed_by)
        for s in apt_sources(etc_apt)
        if s.suite in wanted and "main" in s.components
    ]
