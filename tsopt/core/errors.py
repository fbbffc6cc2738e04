"""Errors that reach the user as one line and exit code 2 (bad input)."""

from __future__ import annotations


class UserInputError(ValueError):
    """Bad input from the command line or a file; the message names the bad value."""
