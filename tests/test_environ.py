"""Which EXECUTOR_ variables decide how commands run (a CLI and its service must agree on those)."""

from __future__ import annotations

from executor.environ import command_settings, environment_digest


def test_places_and_the_service_section_do_not_decide_how_commands_run() -> None:
    """The home, the agent's build folder, the service's own section and the non-settings are left out."""
    environ = {
        "EXECUTOR_HOME": "/h",
        "EXECUTOR_AGENT__BUILD_DIR": "/b",
        "EXECUTOR_SERVICE__SOCKET": "/s",
        "EXECUTOR_TOKEN": "t",
        "EXECUTOR_AGENT__CC": "clang",
        "EXECUTOR_BASH__MAX_COMMAND_BYTES": "1k",
        "PATH": "/bin",
    }
    assert command_settings(environ) == ["EXECUTOR_AGENT__CC", "EXECUTOR_BASH__MAX_COMMAND_BYTES"]
    assert environment_digest({"EXECUTOR_AGENT__BUILD_DIR": "/b"}) is None
    assert environment_digest(environ) == environment_digest({**environ, "EXECUTOR_AGENT__BUILD_DIR": "/other"})
    assert environment_digest(environ) != environment_digest({**environ, "EXECUTOR_AGENT__CC": "gcc"})
