"""The hostfile grammar, defined once: `launch` parses with it and the elastic discovery script
(scripts/discover-hosts.sh.j2) matches with the same regular expressions, rendered into it, so the two
cannot read one line two ways.

A hostfile is split at line feeds only (a `\\r` just before one is dropped: Windows-edited files work;
vertical tab, form feed, U+2028 and the like are not line breaks but refused characters). A line is
    blank or a comment:   [BLANK]*  or  [BLANK]*#anything
    a host:               [BLANK]* HOST [ :N | BLANK+ slots=N ] [ BLANK+ #anything ] [BLANK]*
BLANK is an ASCII space or tab (never a non-breaking or other Unicode space); HOST is what --hosts
accepts (an ASCII letter or digit, then letters, digits, '.', '_', '-', 253 characters at most, so no
`#` inside); N is decimal, no leading zero, 1 to MAX_SLOTS; a slot count is given once. Everything
else is refused: `launch` with one line naming the file, the line number and the fix; the discovery
script, which reads the file again every second while an admin edits it, skips the line (saying so on
stderr) rather than misread it.

The patterns are POSIX extended regular expressions that Python's `re` reads the same way, written with
no backslash but `\\t`, so the template can quote them as bash $'...' strings; the script matches them
with LC_ALL=C, where a non-ASCII character is bytes that no bracket here holds.
"""

from __future__ import annotations

import re

from ..config.errors import UserError, clip

MAX_SLOTS = 100_000
"""The most slots one host may have (a typo such as 10000000000 is refused, not launched)."""
_BLANK = "[ \\t]"
HOST_ERE = "[A-Za-z0-9][-A-Za-z0-9._]{0,252}"
"""One host name: what --hosts accepts."""
_SLOTS = f"[1-9][0-9]{{0,{len(str(MAX_SLOTS)) - 1}}}"
SKIP_ERE = f"{_BLANK}*(#.*)?"
"""A blank line or a comment."""
HOST_LINE_ERE = f"{_BLANK}*({HOST_ERE})(:({_SLOTS})|{_BLANK}+slots=({_SLOTS}))?({_BLANK}+#.*|{_BLANK}*)"
"""A host line; groups: 1 the host, 3 the slots of HOST:N, 4 the slots of `slots=N`."""
_SKIP = re.compile(SKIP_ERE)
_HOST_LINE = re.compile(HOST_LINE_ERE)
FIX = f"write `host`, `host:N` or `host slots=N` (N from 1 to {MAX_SLOTS}, ASCII spaces, `# comment` after a space)"


def parse_line(line: str) -> tuple[str, int] | None:
    """One line (its line feed removed) as (host, slots); None for a blank line or a comment; ValueError
    saying what is wrong for anything else.

    >>> parse_line("n01 slots=4  # rack 2\\r"), parse_line("n02:2"), parse_line("n03"), parse_line(" # spare")
    (('n01', 4), ('n02', 2), ('n03', 1), None)
    """
    line = line.removesuffix("\r")
    if _SKIP.fullmatch(line):
        return None
    match = _HOST_LINE.fullmatch(line)
    slots = int(match.group(3) or match.group(4) or 1) if match else 0
    if match and slots <= MAX_SLOTS:
        return match.group(1), slots
    raise ValueError(_what_is_wrong(line, match is not None))


def _what_is_wrong(line: str, too_many_slots: bool) -> str:
    """The reason a line is refused, as precise as a glance allows."""
    if too_many_slots:
        return f"more than {MAX_SLOTS} slots"
    odd = next((char for char in line.split(" #", 1)[0] if not (" " <= char <= "~" or char == "\t")), None)
    if odd is not None:
        return f"character U+{ord(odd):04X} (only ASCII letters, digits, '.', '_', '-', spaces and tabs)"
    return "not `host`, `host:N` or `host slots=N`"


def parse_hostfile(text: str, where: str) -> tuple[tuple[str, int], ...]:
    """Every (host, slots) of a hostfile, in order; a UserError naming `where`, the line and the fix for
    the first line the grammar refuses, or for a file that names no host.

    >>> parse_hostfile("f1 slots=2\\n# spare\\nf2:4\\nf3\\n", "hosts.txt")
    (('f1', 2), ('f2', 4), ('f3', 1))
    """
    hosts = []
    for number, line in enumerate(text.split("\n"), 1):
        try:
            host = parse_line(line)
        except ValueError as error:
            raise UserError.at(f"{where}:{number}", "", f"{clip(line, 40)}: {error}", FIX) from None
        if host is not None:
            hosts.append(host)
    if not hosts:
        raise UserError.at(where, "", "names no host", "write one `host slots=N` or `host:N` line per node")
    return tuple(hosts)
