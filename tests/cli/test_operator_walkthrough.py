"""The README's operator walkthrough end to end: an operator's image and policy folders, a new profile, checked
before use, a policy developed with `policy test`, then a command run in the new image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from executor.testing.cli import cli

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_a_new_image_and_profile_from_an_operators_folders(home: Path, tmp_path: Path, base_image: str) -> None:
    """Operator folders add to the shipped ones; check, policy test and exec work on the new profile."""
    images = tmp_path / "images"
    (images / "opdata").mkdir(parents=True)
    (images / "opdata" / "Dockerfile").write_text(f"FROM {base_image}\nCOPY marker /etc/opdata-marker\n")
    (images / "opdata" / "marker").write_text("operator image\n")
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "opdata.toml").write_text(
        'extends = "default"\nwithout = ["kill-everything"]\n'
        '[[command]]\nname = "no-network-tools"\ndecision = "deny"\njustification = "Never fetches."\n'
        'prefix = ["curl", "wget"]\nexamples.match = ["curl http://x"]\n'
    )
    config = tmp_path / "executor.toml"
    config.write_text(
        f'[images]\nimages_dir = "{images}"\n[gate]\npolicy_dir = "{policies}"\n'
        '[profiles.opdata]\nimage = "opdata"\npolicy = "opdata"\nmemory = "1.5g"\npids = 256\n'
    )
    try:
        op = ("--config", str(config))
        checked = cli(home, *op, "config", "check", str(config))
        assert checked.code == 0, checked.stderr
        denied = cli(
            home, "--config", str(config), "--json", "policy", "test", "--profile", "opdata", "--", "curl", "x"
        )
        assert denied.json()["decision"] == "deny"
        assert denied.json()["matches"][0]["rule"] == "no-network-tools"
        kill = cli(home, *op, "--json", "policy", "test", "--profile", "opdata", "--", "pkill", "x")
        assert [m["rule"] for m in kill.json()["matches"]] == []
        hooks = cli(home, *op, "policy", "test", "--profile", "opdata", "--write", ".git/hooks/x")
        assert "rule 'git-hooks' (path, deny)" in hooks.stdout
        ran = cli(
            home, "--config", str(config), "--json", "exec", "--profile", "opdata", "--", "cat /etc/opdata-marker"
        )
        assert ran.code == 0, ran.stdout + ran.stderr
        assert "operator image" in ran.json()["text"]
        shipped = cli(home, *op, "--json", "exec", "--", "test -e /etc/opdata-marker || echo plain")
        assert shipped.code == 0 and "plain" in shipped.json()["text"]
    finally:
        subprocess.run(["docker", "rmi", "-f", "executor/opdata:latest"], capture_output=True, timeout=60, check=False)
