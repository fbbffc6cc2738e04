"""Errors that reach the user as one line, and the exit codes that say what kind of failure
each was (``tsopt --help`` and the README list them; :data:`EXIT_CODES` is the one table)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_PACKAGE = 3
EXIT_DATABASE = 4
EXIT_INTERRUPTED = 130

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (EXIT_FAILED, "the work failed (no valid candidate could be built, a bundle could not be "
                  "measured, a genome was rejected by `tsopt verify`)"),
    (EXIT_BAD_INPUT, "bad input: an option, a file or a bundle; the message names the bad value"),
    (EXIT_MISSING_PACKAGE, "a Python package the command needs is not installed"),
    (EXIT_DATABASE, "the database cannot be used (corrupted, read-only, locked, or written by "
                    "a newer tsopt or Optuna); the message names the file and what to do "
                    "(`tsopt db check` says more)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); the same command resumes"),
)
"""Every exit code of ``tsopt`` and what it means."""


class UserInputError(ValueError):
    """Bad input from the command line or a file; the message names the bad value."""


class DatabaseUnusable(UserInputError):
    """The database cannot be used as it is: corrupted, read-only, locked, altered, or of a
    newer schema. The message names the database and what to do; exit code 4 (the command
    line checks for it before it checks for other bad input)."""
