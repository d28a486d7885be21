"""`python -m hpcbundle` is the `hpcbundle` command."""

from .cli import main

main()
