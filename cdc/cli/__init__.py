"""The ``cdc`` command line (typer): ``app`` holds the commands, one module per larger
command (``demo``, ``tail``, ``verify``). The bottom layer (``cdc.config``, ``cdc.errors``,
``cdc.stack``) is outside this package and imports nothing of it."""

from cdc.cli.app import app, main

__all__ = ["app", "main"]
