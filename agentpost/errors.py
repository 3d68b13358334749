"""Errors shared by the command line and the library."""


class UsageError(ValueError):
    """Bad input from the user (a chapter, profile, parameter, seed or data file); the CLI exits with code 2
    and nothing has been written."""
