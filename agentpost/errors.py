"""Errors shared by the command line and the library."""


class UsageError(ValueError):
    """Bad input from the user (a chapter, profile, parameter, seed or data file); the CLI exits with code 2
    and nothing has been written."""


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages: an error names a bad value, never echoes it whole."""
    try:
        text = (
            repr(value)
            if not isinstance(value, (dict, list, tuple, set)) or len(value) < 50
            else f"<{type(value).__name__} of {len(value)}>"
        )
    except (RecursionError, ValueError):  # a deeply nested value; an int too long for repr
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"
