"""hpcbundle: matched Horovod container stacks, site configs, and the launch lines that run them."""

__version__ = "0.1.0"
