"""The one error type for user mistakes: printed as one actionable line, exit status 2."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix: bad input file, unknown name, impossible request.

    Rendered as ``<where>: <key>: <problem> (<fix>)`` so a user knows the file, the
    key and what to do, e.g.::

        recipes/x.yaml: horovod.versoin: unknown key (did you mean version?)

    Several problems found at once are carried together and printed one per line.
    """

    exit_status = 2

    def __init__(self, *lines: str) -> None:
        if not lines:
            raise ValueError("UserError needs at least one line")
        self.lines: tuple[str, ...] = tuple(lines)
        super().__init__("\n".join(self.lines))

    @classmethod
    def at(cls, where: str, key: str, problem: str, fix: str = "") -> "UserError":
        """One problem at one key of one file (or other named source)."""
        return cls(format_problem(where, key, problem, fix))


def format_problem(where: str, key: str, problem: str, fix: str = "") -> str:
    """Format one problem as ``where: key: problem (fix)``; empty parts are left out."""
    head = ": ".join(part for part in (where, key) if part)
    text = f"{head}: {problem}" if head else problem
    return f"{text} ({fix})" if fix else text


def did_you_mean(name: str, choices: list[str] | tuple[str, ...], noun: str = "known") -> str:
    """A fix hint: the closest choice ('did you mean X?'), else the list of choices.

    >>> did_you_mean("cuda11.8", ["cpu-local", "cuda11.8-tf2.14-torch2.1"])
    'did you mean cuda11.8-tf2.14-torch2.1?'
    """
    import difflib

    prefixed = [c for c in choices if c.startswith(name)] if name else []
    near = prefixed[:1] or difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]}?"
    return f"{noun}: " + ", ".join(choices)


CLIP = 40
"""The most characters of a user's value an error echoes (a mistaken file is not printed back)."""


def clip(value: object, limit: int = CLIP) -> str:
    """`value` as repr() text of at most about `limit` characters, e.g. for a key or value in an error.

    >>> clip("root:x:0:0:root:/root:/bin/bash" * 3, 20)
    "'root:x:0:0:root:/ro…"
    """
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


LINE = 2000
"""The most characters of one printed error line (a 1 MB argument echoed back would bury the message)."""


def printable(line: str, limit: int = LINE) -> str:
    r"""`line` with every character a terminal would act on or hide (newline, carriage return, ANSI escape,
    bidi override, a byte that was not UTF-8) written as its escape, so that an error stays one visible line;
    longer than `limit` characters, its middle is cut (the problem and the fix are at the end).

    >>> printable("a\rb\x1b[31m\u202ec")
    'a\\rb\\x1b[31m\\u202ec'
    """
    text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in line)
    return text if len(text) <= limit else text[: limit // 2] + "…" + text[-limit // 2 :]


def shape(value: object) -> str:
    """What a YAML value is, for an error, e.g. 'a boolean (true)', 'a number (8)', 'text of 3 characters':
    text is never echoed (a file given by mistake may hold a secret), nor are collections.

    >>> shape(True), shape(8), shape("hunter2"), shape([1, 2])
    ('a boolean (true)', 'a number (8)', 'text of 7 characters', 'a list of 2 items')
    """
    if isinstance(value, (bool, int, float)) or value is None:
        kind = {bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "nothing")
        return f"{kind} ({yaml_scalar(value)})"
    if isinstance(value, str):
        return f"text of {len(value)} characters"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    return "a mapping" if isinstance(value, dict) else f"a {type(value).__name__}"


def yaml_scalar(value: bool | int | float | None) -> str:
    """A scalar as YAML writes it, at most 20 characters: true, 8, 3.1, null."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)[:20]
