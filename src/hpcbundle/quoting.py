"""The one quoting function for the shell the project writes and prints (sbatch and install scripts, launch lines).

A word bash would read back unchanged inside single quotes, and that a terminal shows as it is,
is single-quoted as shlex.quote does. A word holding a control character (newline, ANSI escape),
a byte that is not UTF-8 (argv decoded with surrogateescape) or an invisible separator is
written as bash's $'...' (the form `printf %q` prints), so every byte of argv survives a copy
and paste and nothing is hidden from the reader.
"""

from __future__ import annotations

import shlex

_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\E", "\a": "\\a", "\b": "\\b"}


def shell_quote(word: str) -> str:
    r"""`word` as one bash word that reads back as exactly `word`.

    >>> print(shell_quote("a b"), shell_quote("\x1b[31mred"), shell_quote("x\ny'"), shell_quote("caf\udce9"))
    'a b' $'\E[31mred' $'x\ny\'' $'caf\xe9'
    """
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_escape(char) for char in word) + "'"


def quoted(word: str) -> str:
    """`word` single-quoted even where it needs no quotes (a line of a script written by printf, which a
    reader of the command must not take for a keyword such as `done`).

    >>> print(quoted("done"), quoted("it's"))
    'done' 'it'"'"'s'
    """
    if not word.isprintable():
        return shell_quote(word)
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    if "\udc80" <= char <= "\udcff":  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{ord(char) - 0xDC00:02x}"
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", errors="surrogatepass"))


def shell_join(words: list[str] | tuple[str, ...]) -> str:
    """Words as one bash line (shlex.join, with shell_quote's $'...' where a word needs it)."""
    return " ".join(shell_quote(word) for word in words)
