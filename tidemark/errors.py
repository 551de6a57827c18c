"""Errors shown to a command-line user as one clear line.

Tested by: tests/tidemark_cli/test_main.py (CliError raised with its one line), tests/app/test_security.py."""


class CliError(Exception):
    """One clear line for the user, and a non-zero exit."""
