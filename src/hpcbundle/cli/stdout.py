"""Standard output that cannot be written (a full disk, a closed pipe) is one line and exit status 2, not an
OSError traceback."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator

from ..config.errors import UserError


class _StdoutSink(io.RawIOBase):
    """Standard output's file descriptor, for a buffered writer: the first write that fails raises UserError,
    and every later one is dropped, so that the flush at interpreter exit has nothing left to fail on."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:  # type: ignore[override]
        if self._failed:
            return len(data)
        try:
            return os.write(self._fd, data)
        except OSError as exc:
            self._failed = True
            raise UserError.at(
                "standard output", "", f"cannot write: {exc.strerror}", "free space, or write to a file with -o FILE"
            ) from None


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """Within it, a failed write to standard output is a UserError (one line, exit 2) rather than an OSError
    traceback, e.g. `hpcbundle rules >/dev/full`. A stream without a file descriptor (a test's) is left as it is."""
    original = sys.stdout
    try:
        fd = original.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    original.flush()
    guarded = io.TextIOWrapper(
        io.BufferedWriter(_StdoutSink(fd)),
        encoding=original.encoding,
        errors=original.errors,
        line_buffering=original.line_buffering,
    )
    sys.stdout = guarded
    try:
        yield
        guarded.flush()
    finally:
        sys.stdout = original
        with contextlib.suppress(UserError):
            guarded.flush()
