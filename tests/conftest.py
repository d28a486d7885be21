"""Shared pytest configuration."""

pytest_plugins = [
    "hpcbundle_testbed.plugin",
    "hpcbundle_testbed.docker_plugin",
    "hpcbundle_testbed.gpu_plugin",
    "hpcbundle_testbed.gpu_device",
    "hpcbundle_testbed.sif_plugin",
]
