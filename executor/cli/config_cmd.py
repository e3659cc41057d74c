"""``executor config check|show``.

``config check FILE`` validates every field and then resolves every reference the file makes, reporting all
problems at once (exit 2): the default profile names a profile; each profile's policy is found on the search path
and loads with its examples checked; each profile's image is an image folder on the search path or a local image
(the engine is asked when one answers; otherwise the check says it could not look).
"""

from __future__ import annotations

import json
from pathlib import Path

import trio
import typer

from executor.cli._common import EXIT_USAGE, emit_done, fail, state
from executor.config import Settings, load_settings
from executor.errors import ConfigError, EngineError, EngineUnavailable, ImageError
from executor.gate.policy import load_profile_policy, policy_path
from executor.sandbox.docker import DockerEngine, image_folder
from executor.sandbox.docker.images import folder_names, image_exists

app = typer.Typer(help="Check and show settings.", no_args_is_help=True)


def _local_images(settings: Settings, refs: set[str]) -> dict[str, bool] | None:
    """Which of ``refs`` the engine has locally; None when no engine answers (the check then says so)."""

    async def look() -> dict[str, bool]:
        engine = await DockerEngine.connect(settings.docker)
        try:
            found: dict[str, bool] = {}
            for ref in sorted(refs):
                try:
                    found[ref] = await image_exists(engine, ref)
                except (ImageError, EngineError):
                    found[ref] = False  # not a valid reference: certainly not local
            return found
        finally:
            await engine.aclose()

    if not refs:
        return {}
    try:
        return trio.run(look)
    except EngineUnavailable:
        return None


def _sources(settings: Settings) -> dict[str, dict[str, str]]:
    """Where each profile's image and policy come from (a folder, a local reference, a file), or what is wrong."""
    sources: dict[str, dict[str, str]] = {}
    for name, profile in sorted(settings.profiles.items()):
        folder = image_folder(settings.images, profile.image)
        image = f"folder {folder}" if folder is not None else f"local image {profile.image!r}"
        try:
            policy = str(policy_path(settings.gate, profile.policy))
        except ConfigError as exc:
            policy = f"(not found: {exc})"
        sources[name] = {"image": image, "policy": policy}
    return sources


def check_references(settings: Settings) -> tuple[list[str], list[str]]:
    """Every problem with what ``settings`` refers to, and notes on what could not be checked.

    Returns:
        ``(problems, notes)``: each problem names the setting and what to do.
    """
    problems: list[str] = []
    notes: list[str] = []
    if settings.default_profile not in settings.profiles:
        known = ", ".join(sorted(settings.profiles))
        problems.append(
            f"default_profile: {settings.default_profile!r} names no profile; known profiles: {known} "
            "(add [profiles." + settings.default_profile + "] or pick a known one)"
        )
    unresolved: dict[str, list[str]] = {}
    for name, profile in sorted(settings.profiles.items()):
        try:
            load_profile_policy(settings.gate, profile)
        except ConfigError as exc:
            problems.append(f"profiles.{name}.policy: {exc}")
        if image_folder(settings.images, profile.image) is None:
            unresolved.setdefault(profile.image, []).append(name)
    local = _local_images(settings, set(unresolved))
    if local is None:
        notes.append(
            "images named by no folder were not checked against the engine (no engine answered): "
            + ", ".join(sorted(unresolved))
        )
    else:
        for image, profiles in sorted(unresolved.items()):
            if not local.get(image):
                folders = ", ".join(folder_names(settings.images)) or "none"
                for name in profiles:
                    problems.append(
                        f"profiles.{name}.image: {image!r} is no image folder ({folders}) and no local image; "
                        "add a folder to images.images_dir, load the image, or name a known one"
                    )
    return problems, notes


@app.command("check")
def check(ctx: typer.Context, file: Path = typer.Argument(..., help="A TOML settings file.")) -> None:
    """Validate a settings file and everything it refers to; print every problem and exit 2, or say it is valid."""
    json_mode = state(ctx).json
    try:
        settings = load_settings(file)
    except ConfigError as exc:
        fail(str(exc), code=EXIT_USAGE, json_mode=json_mode)
    problems, notes = check_references(settings)
    if problems:
        message = f"{file}: {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems)
        fail(message, code=EXIT_USAGE, json_mode=json_mode)
    text = "\n".join([f"{file}: valid", *(f"note: {n}" for n in notes)])
    emit_done({"file": str(file), "notes": notes}, text, json_mode=json_mode)


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Print the effective settings (defaults < file < EXECUTOR_* environment) and where profiles' parts come from."""
    st = state(ctx)
    settings = st.settings()
    data = json.loads(settings.model_dump_json())
    sources = _sources(settings)
    lines = [json.dumps(data, indent=2, sort_keys=True), "", "where each profile's image and policy come from:"]
    for name, where in sources.items():
        lines.append(f"  {name}: image from {where['image']}; policy {where['policy']}")
    emit_done({"settings": data, "sources": sources}, "\n".join(lines), json_mode=st.json)
