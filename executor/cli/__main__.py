"""``python -m executor.cli``."""

from executor.cli.main import main

main()
