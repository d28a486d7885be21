"""Container runtime classes, one per file; importing this package registers them all in RUNTIMES."""

from ...registry import import_all

import_all(__name__, __path__)
