"""A process that returns one command's result and is then killed while it keeps working.

``python -m tests.session._kill_child HOME AGENT_BUILD_DIR``

It opens a session, runs one command whose output is known, prints the result as one JSON line, and then keeps
running ``true`` in the same session until it is killed (its clean-up never runs; the test removes the session).
"""

from __future__ import annotations

import json
import sys

import trio

from executor.config import load_settings
from executor.session import open_executor

COMMAND = "seq 1 20000; echo done >&2"
"""What the child runs: about 108 KiB of stdout and one line of stderr."""


async def _main(home: str, build_dir: str) -> None:
    settings = load_settings(
        overrides={"home": home, "agent": {"build_dir": build_dir}, "docker": {"gc_on_start": False}}
    )
    async with open_executor(settings) as executor, executor.open_session() as session:
        result = await session.bash(COMMAND)
        line = {
            "session_id": session.id,
            "action_id": result.action_id,
            "artifact_id": result.artifact_id,
            "outcome": result.outcome,
        }
        print(json.dumps(line), flush=True)
        while True:  # busy when the kill lands: the next command's records are being written
            await session.bash("true")


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2])
