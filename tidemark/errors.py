"""Errors shown to a command-line user as one clear line."""


class CliError(Exception):
    """One clear line for the user, and a non-zero exit."""
