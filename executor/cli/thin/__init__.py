"""The thin CLI: the session commands as a client of a running service, standard library only.

:func:`executor.cli.thin.run.run_thin` runs a command over the service when one answers and returns its exit
status, or None when the command must run in-process (no service, an operator command, ``--help``). Nothing here
imports pydantic, docker, trio, typer, httpx or anyio (an import-linter contract and a subprocess test check it).
"""
