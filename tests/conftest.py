"""Shared pytest configuration."""

pytest_plugins = ["tests.fixtures.plugin", "tests.fixtures.docker_plugin"]
