"""Write outputs atomically: a reader sees the old file or the whole new one, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..config.errors import UserError


def write_atomic(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write `text` (or bytes, e.g. a PNG) to `path` through a temp file in the same directory and a rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UserError.at(
            str(path), "", f"cannot write: {exc.strerror}", "check the directory and its permissions"
        ) from None
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as binary:
                binary.write(text)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
