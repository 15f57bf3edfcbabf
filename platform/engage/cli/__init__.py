"""The engage command-line interface (thin: it parses and calls the API)."""

from engage.cli.exit_codes import EXIT_CODES
from engage.cli.main import app, main

__all__ = ["EXIT_CODES", "app", "main"]
