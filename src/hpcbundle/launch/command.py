"""A generated command as explained parts: every token knows the key it came from and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from ..config.sites import Site
from ..quoting import shell_join

Segment = Literal["env", "launcher", "wrapper", "runtime", "program"]


@dataclass(frozen=True)
class Part:
    """Some adjacent tokens, where they came from and one line of why.

    >>> Part(("-np", "4"), "flag --np", "number of ranks", "launcher").tokens
    ('-np', '4')
    """

    tokens: tuple[str, ...]
    source: str
    why: str
    segment: Segment


class Parts:
    """Collects the parts of one segment; a site key gets the site's own `why` line when it has one."""

    def __init__(self, site: Site, segment: Segment) -> None:
        self._site = site
        self.segment: Segment = segment
        self.items: list[Part] = []

    def site(self, key: str, tokens: Iterable[str], why: str, how: str = "") -> None:
        """Tokens that come from site key `key` (e.g. 'env.NCCL_SOCKET_IFNAME'); `how` follows the
        key in the source, e.g. ', derived from network.interfaces'."""
        self.add(tokens, f"site {self._site.name} {key}{how}", self._site.why.get(key, why))

    def add(self, tokens: Iterable[str], source: str, why: str) -> None:
        self.items.append(Part(tuple(tokens), source, why, self.segment))


@dataclass(frozen=True)
class Command:
    """A whole command: `argv` to run, `display` to print, `explain` to justify each token."""

    parts: tuple[Part, ...]

    @property
    def argv(self) -> list[str]:
        return [token for part in self.parts for token in part.tokens]

    def display(self) -> str:
        """One shell line that bash parses back into exactly `argv` (control characters as $'...')."""
        return shell_join(self.argv)

    def segments(self) -> list[list[str]]:
        """The tokens grouped by segment (env, launcher, wrappers, runtime, program): a script's lines."""
        groups: list[list[str]] = []
        previous: Segment | None = None
        for part in self.parts:
            if part.segment != previous:
                groups.append([])
                previous = part.segment
            groups[-1].extend(part.tokens)
        return [words for words in groups if words]

    def explain(self) -> list[str]:
        """`tokens  <- source: why`, one line per part, e.g.
        `-x NCCL_SOCKET_IFNAME=^virbr0,lo  <- site ib-v100 env.NCCL_SOCKET_IFNAME: keep NCCL off ...`."""
        shown = [shell_join(part.tokens) if part.tokens else "(nothing)" for part in self.parts]
        width = min(max(map(len, shown), default=0), 40)
        return [f"{text:<{width}}  <- {part.source}: {part.why}" for text, part in zip(shown, self.parts, strict=True)]
