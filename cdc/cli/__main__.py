"""``python -m cdc.cli``."""

from cdc.cli.app import main

main()
