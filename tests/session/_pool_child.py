"""A process that keeps a warm pool, or holds a session, until it is killed.

``python -m tests.session._pool_child HOME PROFILE ORPHAN_S [MODE]``

MODE ``pool`` (the default): it prints ``ready`` once its pool holds one session. ``held``/``kept``: it opens an
unnamed session (``keep=True`` for ``kept``, as ``session start`` does) and prints ``ready SESSION_ID``;
``claimed``/``claimed-kept``: the same, but the session is claimed from its pool. Then it sleeps until killed (its
clean-up never runs).
"""

from __future__ import annotations

import sys

import trio

from executor.config import load_settings
from executor.session import open_executor


async def _main(home: str, profile: str, orphan_exit_s: float, mode: str) -> None:
    pooled = mode in ("pool", "claimed", "claimed-kept")
    settings = load_settings(
        overrides={
            "home": home,
            "default_profile": profile,
            "profiles": {profile: {"pool": {"size": 1 if pooled else 0}}},
            "agent": {"orphan_exit_s": orphan_exit_s},
            "docker": {"gc_on_start": False},
        }
    )
    async with open_executor(settings) as executor:
        if pooled:
            with trio.fail_after(120):
                while True:
                    if executor.pool_stats()[0].ready >= 1:
                        break
                    await trio.sleep(0.05)
        if mode == "pool":
            print("ready", flush=True)
            await trio.sleep_forever()
        async with executor.open_session(keep=mode.endswith("kept")) as session:
            print("ready", session.id, flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "pool")
