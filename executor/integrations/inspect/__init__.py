"""The executor as an inspect_ai sandbox provider: ``sandbox="executor"`` in an inspect task.

Install the extra (``pip install 'executor[inspect]'``); inspect finds the provider through the ``inspect_ai`` entry
point. Each sample gets its own session container (a fresh one; the warm pool's hook is
:meth:`ExecutorSandboxEnvironment.sample_init`), opened on one executor per process whose trio loop runs in a thread
(:mod:`executor.session.threaded`). ``exec`` is the session's raw exec (an argument list, no shell), files go
through the gated ``write_file`` (parents created) and ``read_file``; every action is gated and journaled.

Configuration (``sandbox=("executor", ExecutorSandboxConfig(...))`` or a dict): the executor's own settings file, a
profile, an image, and ``gate_mode``. An evaluation runs without a person, so an ask can never be answered: set
``gate_mode="observe"`` (harness mode: the gate evaluates and journals every action but never blocks one, and the
container is the only boundary) or expect asked actions to fail with ``PermissionError``. It is never the default.

What the provider does not do, and why (the self-check's xfails):

- ``exec(user=...)`` with another user: commands run only as the session user; root is never used, and the agent
  drops every command to that one unprivileged user. Another user raises ``SandboxUserUnsupportedError``; a user
  absent from the image's ``/etc/passwd`` is a failed result naming it, as docker reports it.
"""

from __future__ import annotations

from executor.integrations.inspect.provider import ExecutorSandboxConfig, ExecutorSandboxEnvironment

__all__ = ["ExecutorSandboxConfig", "ExecutorSandboxEnvironment"]
