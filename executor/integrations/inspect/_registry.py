"""The ``inspect_ai`` entry point: importing it registers the ``executor`` sandbox provider with inspect."""

from __future__ import annotations

from executor.integrations.inspect.provider import ExecutorSandboxEnvironment

__all__ = ["ExecutorSandboxEnvironment"]
