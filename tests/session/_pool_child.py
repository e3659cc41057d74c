"""A process that keeps a warm pool until it is killed.

``python -m tests.session._pool_child HOME PROFILE ORPHAN_S``

It prints ``ready`` once its pool holds one session, then sleeps until killed (its clean-up never runs).
"""

from __future__ import annotations

import sys

import trio

from executor.config import load_settings
from executor.session import open_executor


async def _main(home: str, profile: str, orphan_exit_s: float) -> None:
    settings = load_settings(
        overrides={
            "home": home,
            "default_profile": profile,
            "profiles": {profile: {"pool": {"size": 1}}},
            "agent": {"orphan_exit_s": orphan_exit_s},
            "docker": {"gc_on_start": False},
        }
    )
    async with open_executor(settings) as executor:
        with trio.fail_after(120):
            while True:
                if executor.pool_stats()[0].ready >= 1:
                    break
                await trio.sleep(0.05)
        print("ready", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2], float(sys.argv[3]))
