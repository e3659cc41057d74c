"""Settings: precedence, validation at load, and the README table."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from executor import config as config_module
from executor.config import DEFAULT_DOCKER_HOST, TOML_MAX_BYTES, Settings, load_settings, parse_bytes, settings_table
from executor.errors import ConfigError

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults_are_the_hardened_ones() -> None:
    """The default profile has no network, a read-only root, an unprivileged user and limits on."""
    profile = load_settings().profile()
    assert profile.network == "none"
    assert profile.read_only_root is True
    assert profile.uid == 1000 and profile.gid == 1000
    assert profile.memory == 1024**3
    assert profile.pids == 512
    assert profile.seccomp == "pinned"
    assert profile.privileged is False


def test_pool_defaults_keep_none_in_process_and_a_few_in_the_service() -> None:
    """The in-process API keeps no warm sessions by default; the service keeps two per profile, made two at a time."""
    pool = load_settings().profile().pool
    assert (pool.size, pool.service_size, pool.max_creating) == (0, 2, 2)
    assert (pool.max_idle_s, pool.refill_delay_s, pool.image_check_s) == (600.0, 0.25, 10.0)
    assert (pool.backoff_initial_s, pool.backoff_max_s) == (0.5, 30.0)


def test_precedence_file_then_environment_then_overrides(tmp_path: Path) -> None:
    """A file beats the defaults, the environment beats the file, explicit overrides beat everything."""
    file = tmp_path / "c.toml"
    file.write_text("[bash]\ntimeout_ms = 1000\ngrace_ms = 10\n[artifacts]\nview_head_lines = 3\n")
    from_file = load_settings(file)
    assert (from_file.bash.timeout_ms, from_file.bash.grace_ms, from_file.artifacts.view_head_lines) == (1000, 10, 3)
    env = {"EXECUTOR_BASH__TIMEOUT_MS": "2000", "EXECUTOR_BASH__GRACE_MS": "20"}
    from_env = load_settings(file, environ=env)
    assert (from_env.bash.timeout_ms, from_env.bash.grace_ms, from_env.artifacts.view_head_lines) == (2000, 20, 3)
    top = load_settings(file, environ=env, overrides={"bash": {"timeout_ms": 3000}})
    assert (top.bash.timeout_ms, top.bash.grace_ms) == (3000, 20)


def test_executor_config_variable_names_the_file(tmp_path: Path) -> None:
    """EXECUTOR_CONFIG names the TOML file when no explicit path is given."""
    file = tmp_path / "c.toml"
    file.write_text("default_profile = 'small'\n[profiles.small]\nmemory = '256m'\n")
    settings = load_settings(environ={"EXECUTOR_CONFIG": str(file)})
    assert settings.profile().memory == 256 * 1024**2
    assert "default" in settings.profiles


def test_environment_accepts_json_for_tables() -> None:
    """A table-valued setting can come from the environment as JSON."""
    settings = load_settings(environ={"EXECUTOR_PROFILES": '{"ci": {"pids": 64}}'})
    assert settings.profile("ci").pids == 64


@pytest.mark.parametrize(
    ("profile", "field", "needle"),
    [
        ({"pids": 0}, "profiles.bad.pids", "greater than or equal"),
        ({"pids": -1}, "profiles.bad.pids", "greater than or equal"),
        ({"memory": "3m"}, "profiles.bad.memory", "greater than or equal"),
        ({"network": "host"}, "profiles.bad.network", "not allowed"),
        ({"privileged": True}, "profiles.bad.privileged", "never allowed"),
        ({"volumes": {"/var/run/docker.sock": "/var/run/docker.sock"}}, "profiles.bad.volumes", "Docker socket"),
        ({"volumes": {"/etc": "/host-etc"}}, "profiles.bad.volumes", "host path"),
        ({"pid_mode": "host"}, "profiles.bad.pid_mode", "never allowed"),
        ({"devices": ["/dev/sda"]}, "profiles.bad.devices", "host devices"),
        ({"user": "0:0"}, "profiles.bad.user", "never run as root"),
        ({"env": {"GITHUB_TOKEN": "x"}}, "profiles.bad.env", "credential"),
        ({"env": {"A,B": "x"}}, "profiles.bad.env", "without '=', ',' or NUL"),
        ({"tmp_size": "abc"}, "profiles.bad.tmp_size", "not a size"),
        ({"surprise": 1}, "profiles.bad.surprise", "unknown setting"),
        ({"gate_mode": "off"}, "profiles.bad.gate_mode", "'enforce' or 'observe'"),
        ({"pool": {"size": -1}}, "profiles.bad.pool.size", "greater than or equal"),
        ({"pool": {"service_size": 1000}}, "profiles.bad.pool.service_size", "less than or equal"),
        ({"pool": {"max_idle_s": 0}}, "profiles.bad.pool.max_idle_s", "greater than"),
        ({"pool": {"max_creating": 0}}, "profiles.bad.pool.max_creating", "greater than or equal"),
        ({"pool": {"refill_delay_s": -1}}, "profiles.bad.pool.refill_delay_s", "greater than or equal"),
        ({"pool": {"image_check_s": 0}}, "profiles.bad.pool.image_check_s", "greater than"),
        ({"pool": {"backoff_initial_s": 5, "backoff_max_s": 1}}, "profiles.bad.pool", "at least"),
        ({"pool": {"sise": 1}}, "profiles.bad.pool.sise", "unknown setting"),
        # Accepted once, then refused by the engine at session start (exit 125 instead of 2).
        ({"cpus": 0.0001}, "profiles.bad.cpus", "greater than or equal to 0.01"),
        ({"user": "4294967296:1"}, "profiles.bad.user", "below 4294967295"),
        ({"home": "//"}, "profiles.bad.home", "absolute path below '/'"),
        ({"workspace": "//"}, "profiles.bad.workspace", "absolute path below '/'"),
        ({"volumes": {"data": "/workspace"}}, "profiles.bad", "hidden by the workspace"),
        ({"volumes": {"data": "/tmp/"}}, "profiles.bad", "hidden by the /tmp tmpfs"),
        ({"volumes": {"data": "/.executor/state"}}, "profiles.bad", "the agent's own folder"),
        ({"volumes": {"a": "/data", "b": "/data/"}}, "profiles.bad", "both mounted at '/data'"),
        ({"cpus": True}, "profiles.bad", "is a boolean"),
    ],
)
def test_bad_profiles_fail_at_load_naming_the_field(profile: dict[str, object], field: str, needle: str) -> None:
    """Each unsafe or malformed profile value fails at load and the error names the field."""
    with pytest.raises(ConfigError, match=rf"(?s){re.escape(field)}: .*{re.escape(needle)}"):
        load_settings(overrides={"profiles": {"bad": profile}})


def test_unknown_top_level_setting_is_rejected() -> None:
    """A misspelled section is an error, not silently ignored."""
    with pytest.raises(ConfigError, match=r"bsah: unknown setting"):
        load_settings(overrides={"bsah": {"timeout_ms": 1}})


def test_harness_mode_and_the_file_limits_have_safe_defaults() -> None:
    """The gate enforces unless a profile says observe; reads cap at 64 MiB; commands up to 2 MiB are accepted."""
    settings = load_settings()
    assert settings.profile().gate_mode == "enforce"
    assert (settings.write.read_max_bytes, settings.write.max_bytes) == (64 * 1024**2, 64 * 1024**2)
    assert (settings.bash.max_command_bytes, settings.bash.max_stdin_bytes) == (2 * 1024**2, 64 * 1024**2)
    observed = load_settings(overrides={"profiles": {"default": {"gate_mode": "observe"}}})
    assert observed.profile().gate_mode == "observe"
    with pytest.raises(ConfigError, match=r"write.read_max_bytes: .*less than or equal"):
        load_settings(overrides={"write": {"read_max_bytes": "65M"}})


def test_max_timeout_must_cover_the_default() -> None:
    """A cap below the default timeout is refused at load."""
    with pytest.raises(ConfigError, match=r"bash.max_timeout_ms: .*at least timeout_ms"):
        load_settings(overrides={"bash": {"timeout_ms": 5000, "max_timeout_ms": 1000}})


def test_missing_and_malformed_files_say_what_to_do(tmp_path: Path) -> None:
    """A missing file and a non-TOML file each give a clear ConfigError."""
    with pytest.raises(ConfigError, match=r"does not exist; pass an existing TOML file"):
        load_settings(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[bash\n")
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        load_settings(bad)


def test_settings_files_are_read_bounded(tmp_path: Path) -> None:
    """A device, a FIFO, an oversized file and deep nesting are ConfigErrors naming the file, never a hang or crash."""
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (zero, fifo, tmp_path):
        with pytest.raises(ConfigError, match=r": not a regular file; pass a TOML file$"):
            load_settings(path)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * TOML_MAX_BYTES + "\n")
    with pytest.raises(ConfigError, match=rf"big.toml: larger than {TOML_MAX_BYTES} bytes"):
        load_settings(big)
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000)
    with pytest.raises(
        ConfigError,
        match=r"deep.toml: not valid TOML: arrays, tables or dotted keys nested too deeply "
        r"\(100001 levels; at most 64\)$",
    ):
        load_settings(deep)
    fine = tmp_path / "fine.toml"
    fine.write_text("# " + "x" * (TOML_MAX_BYTES - 100) + "\n[bash]\ntimeout_ms = 5000\n")
    assert load_settings(fine).bash.timeout_ms == 5000


def test_unknown_profile_lists_the_known_ones() -> None:
    """Asking for a profile that does not exist names the ones that do."""
    with pytest.raises(ConfigError, match=r"no profile named 'gpu'; known profiles: ci, default, untrusted"):
        load_settings().profile("gpu")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (512, 512),
        ("64k", 65536),
        ("1g", 1024**3),
        ("2MiB", 2 * 1024**2),
        ("1.5g", 3 * 1024**3 // 2),
        ("0.5 GiB", 512 * 1024**2),
        ("1.1t", 1024**4 + 1024**4 // 10),
    ],
)
def test_parse_bytes_accepts_numbers_and_units(raw: object, expected: int) -> None:
    """Sizes are bytes or numbers with binary units, fractions included as Docker accepts them."""
    assert parse_bytes(raw) == expected


@pytest.mark.parametrize("raw", ["1.5", "g", "1..5g", "-1g", "1,5g", True])
def test_parse_bytes_refuses_what_is_not_a_size(raw: object) -> None:
    """A fraction of a byte, a bare unit or a sign is refused with the accepted forms named."""
    with pytest.raises(ValueError, match=r"size|bytes"):
        parse_bytes(raw)


def test_a_fractional_size_loads_into_a_profile() -> None:
    """A profile takes memory = "1.5g" as Docker would."""
    settings = load_settings(overrides={"profiles": {"big": {"memory": "1.5g"}}})
    assert settings.profile("big").memory == 3 * 1024**3 // 2


def test_messages_lose_pydantics_value_error_prefix() -> None:
    """A validator's message reaches the reader without pydantic's 'Value error,' prefix."""
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides={"profiles": {"x": {"memory": "lots"}}})
    message = str(caught.value)
    assert "Value error" not in message
    assert re.search(r"profiles\.x\.memory: 'lots' is not a size", message)


def test_every_field_has_a_docstring() -> None:
    """No setting ships without a description (it feeds the README table)."""
    rows = config_module._rows(Settings, "")
    assert rows
    missing = [key for key, _default, description in rows if not description]
    assert missing == []


def test_readme_settings_table_matches_the_model() -> None:
    """The README's settings table is the one generated from the model (run `just docs` to refresh)."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", text, re.S)
    assert match is not None, "README lacks the settings-table markers"
    assert match.group(1) == settings_table()


def test_all_exports_exist() -> None:
    """Every name in config.__all__ is defined."""
    for name in config_module.__all__:
        assert hasattr(config_module, name), name


def test_the_idle_limit_defaults_to_an_hour_and_takes_durations_and_none(tmp_path: Path) -> None:
    """sessions.idle_s: 3600 by default; seconds, '30m', '2h' and 'none' (no limit) from a file or the environment."""
    assert load_settings().sessions.idle_s == 3600.0
    assert load_settings().sessions.idle_check_s == 30.0
    assert load_settings(environ={"EXECUTOR_SESSIONS__IDLE_S": "30m"}).sessions.idle_s == 1800.0
    assert load_settings(environ={"EXECUTOR_SESSIONS__IDLE_S": "none"}).sessions.idle_s is None
    toml = tmp_path / "s.toml"
    toml.write_text('[sessions]\nidle_s = "2h"\n')
    assert load_settings(toml).sessions.idle_s == 7200.0


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "2y", "400d", "true"])
def test_a_bad_idle_limit_fails_at_load(raw: str) -> None:
    """An idle limit that is not positive seconds, a duration up to a year, or 'none' fails at load, named."""
    with pytest.raises(ConfigError, match=r"sessions\.idle_s: .*(idle limit|at most a year)"):
        load_settings(environ={"EXECUTOR_SESSIONS__IDLE_S": raw})
    with pytest.raises(ConfigError, match=r"sessions\.idle_check_s"):
        load_settings(overrides={"sessions": {"idle_check_s": 0}})


def _context(folder: Path, name: str, host: str, *, current: bool = False) -> None:
    """A Docker CLI context as `docker context create` lays it out (meta.json under the sha256 of its name)."""
    meta = folder / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": False}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}))
    if current:
        (folder / "config.json").write_text(json.dumps({"currentContext": name}))


def test_the_engine_is_where_the_docker_cli_would_connect(tmp_path: Path) -> None:
    """docker.base_url, when no source sets it: DOCKER_HOST, else DOCKER_CONTEXT, else config.json's currentContext
    (under DOCKER_CONFIG or ~/.docker), else the default socket; an executor setting wins over all of them."""
    folder = tmp_path / "dockercfg"
    _context(folder, "ctx-a", "unix:///run/a.sock", current=True)
    _context(folder, "ctx-b", "tcp://10.0.0.2:2375")
    env = {"DOCKER_CONFIG": str(folder)}
    assert load_settings().docker.base_url == DEFAULT_DOCKER_HOST
    assert load_settings(environ=env).docker.base_url == "unix:///run/a.sock"
    assert load_settings(environ={**env, "DOCKER_CONTEXT": "ctx-b"}).docker.base_url == "tcp://10.0.0.2:2375"
    assert load_settings(environ={**env, "DOCKER_CONTEXT": "default"}).docker.base_url == DEFAULT_DOCKER_HOST
    both = {**env, "DOCKER_CONTEXT": "ctx-b", "DOCKER_HOST": "unix:///run/h.sock"}
    assert load_settings(environ=both).docker.base_url == "unix:///run/h.sock"
    explicit = {**both, "EXECUTOR_DOCKER__BASE_URL": "unix:///run/x.sock"}
    assert load_settings(environ=explicit).docker.base_url == "unix:///run/x.sock"
    home = tmp_path / "home"
    _context(home / ".docker", "ctx-h", "unix:///run/home.sock", current=True)
    assert load_settings(environ={"HOME": str(home)}).docker.base_url == "unix:///run/home.sock"
    assert load_settings(environ={"HOME": str(tmp_path / "nobody")}).docker.base_url == DEFAULT_DOCKER_HOST


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        (
            {"DOCKER_CONTEXT": "nope"},
            r"Docker context 'nope' \(DOCKER_CONTEXT\) does not exist under .*docker context ls",
        ),
        ({"DOCKER_HOST": "ssh://user@box"}, r"DOCKER_HOST 'ssh://user@box': ssh:// engines are not supported"),
        ({"DOCKER_HOST": "box:2375"}, r"DOCKER_HOST 'box:2375' is not an engine address"),
        ({"DOCKER_HOST": "tcp://box:2376", "DOCKER_TLS_VERIFY": "1"}, r"TLS engines are not supported yet"),
        ({"DOCKER_CONTEXT": "tls"}, r"Docker context 'tls' \(DOCKER_CONTEXT\) uses TLS"),
        ({"EXECUTOR_DOCKER__BASE_URL": "http//x"}, r"docker\.base_url: engine address 'http//x' is not an engine"),
    ],
)
def test_an_engine_that_cannot_be_reached_this_way_fails_at_load(
    tmp_path: Path, environ: dict[str, str], needle: str
) -> None:
    """A missing context, an ssh:// or TLS engine, or an address that is no engine is refused at load, naming where it
    came from."""
    folder = tmp_path / "dockercfg"
    _context(folder, "tls", "tcp://box:2376")
    (folder / "contexts" / "tls" / hashlib.sha256(b"tls").hexdigest() / "docker").mkdir(parents=True)
    with pytest.raises(ConfigError, match=needle):
        load_settings(environ={"DOCKER_CONFIG": str(folder), **environ})


@pytest.mark.parametrize("image", ["../containers/json", "Bad Name", "a/../b"])
def test_a_profile_image_that_is_no_reference_is_refused_at_load(image: str) -> None:
    with pytest.raises(ConfigError, match=r"profiles\.default\.image"):
        load_settings(overrides={"profiles": {"default": {"image": image}}})
    assert load_settings(overrides={"profiles": {"default": {"image": "team/tool:1.2"}}}).profiles["default"].image


def test_the_gate_reads_a_program_on_stdin_up_to_a_bound() -> None:
    """gate.stdin_program_max_bytes defaults to 1 MiB, takes sizes, and refuses what is out of range at load."""
    assert load_settings().gate.stdin_program_max_bytes == 1024**2
    assert load_settings(overrides={"gate": {"stdin_program_max_bytes": "4k"}}).gate.stdin_program_max_bytes == 4096
    for bad in (-1, "65m", "lots"):
        with pytest.raises(ConfigError, match=r"gate\.stdin_program_max_bytes"):
            load_settings(overrides={"gate": {"stdin_program_max_bytes": bad}})


def test_home_is_made_absolute_and_must_be_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative home is taken from the current folder (the engine mounts only absolute paths); an empty one, or
    a path that is a file, is refused at load naming the field."""
    monkeypatch.chdir(tmp_path)
    assert load_settings(environ={"EXECUTOR_HOME": "rel/home"}).home == tmp_path / "rel" / "home"
    (tmp_path / "file").write_text("x")
    for bad, needle in (("", "is empty"), (" ", "is empty"), (str(tmp_path / "file"), "not a folder")):
        with pytest.raises(ConfigError, match=rf"home: .*{needle}"):
            load_settings(environ={"EXECUTOR_HOME": bad})


def test_the_client_variables_are_not_settings() -> None:
    """EXECUTOR_URL and EXECUTOR_TOKEN (the service a CLI talks to) and EXECUTOR_CONFIG are not settings: loading
    settings with them in the environment works and takes nothing from them; another unknown EXECUTOR_ name is still
    refused."""
    environ = {"EXECUTOR_URL": "unix:///nowhere.sock", "EXECUTOR_TOKEN": "t" * 20, "EXECUTOR_GATE__TRUST": "2"}
    assert load_settings(environ=environ).gate.trust == 2
    with pytest.raises(ConfigError, match="urll"):
        load_settings(environ={"EXECUTOR_URLL": "x"})


def test_a_boolean_is_no_number_in_any_section() -> None:
    """TOML's `timeout_ms = true` was a 1 ms deadline (pydantic's lax int); any numeric field refuses a boolean."""
    for section, field in (("bash", "timeout_ms"), ("docker", "api_timeout_s"), ("gate", "trust")):
        with pytest.raises(ConfigError, match=rf"{section}: {field}: true is a boolean"):
            load_settings(overrides={section: {field: True}})
    assert load_settings(overrides={"docker": {"gc_on_start": False}}).docker.gc_on_start is False


@pytest.mark.parametrize(("raw", "mode"), [(0o600, 0o600), ("644", 0o644), ("0o755", 0o755), ("0640", 0o640)])
def test_new_file_mode_is_octal_and_defaults_to_0644(raw: object, mode: int) -> None:
    assert load_settings().write.new_file_mode == 0o644
    assert load_settings(overrides={"write": {"new_file_mode": raw}}).write.new_file_mode == mode


@pytest.mark.parametrize(("raw", "needle"), [(644, "write 0o644"), ("u+x", "not an octal"), (0o4755, "less than")])
def test_a_mode_written_in_decimal_or_with_special_bits_fails_at_load(raw: object, needle: str) -> None:
    """`new_file_mode = 644` in TOML is 0o1204 (sticky, owner cannot read): refused with the spelling to use; set-id
    and sticky bits are never given to a new file."""
    with pytest.raises(ConfigError, match=rf"write.new_file_mode: .*{needle}"):
        load_settings(overrides={"write": {"new_file_mode": raw}})


def test_an_operators_folder_must_exist(tmp_path: Path) -> None:
    """A misspelt gate.policy_dir or images.images_dir silently left the shipped files in force."""
    for section, field in (("gate", "policy_dir"), ("images", "images_dir")):
        with pytest.raises(ConfigError, match=rf"{section}.{field}: .*not an existing folder"):
            load_settings(overrides={section: {field: str(tmp_path / "polices")}})
        assert getattr(getattr(load_settings(overrides={section: {field: str(tmp_path)}}), section), field) == tmp_path


@pytest.mark.parametrize("name", ["\x1b[31mred", "a\nb", "", "-x", "a" * 65, "a b"])
def test_a_profile_name_is_a_plain_word(name: str) -> None:
    with pytest.raises(ConfigError, match="profile name"):
        load_settings(overrides={"profiles": {name: {}}})
    assert "ci-2.large" in load_settings(overrides={"profiles": {"ci-2.large": {}}}).profiles


def test_archive_bounds_default_and_refuse_bad_values_at_load() -> None:
    """The archive.* bounds have their defaults, take byte units, and refuse out-of-range values at load."""
    archive = load_settings().archive
    assert (archive.max_expanded_bytes, archive.max_members, archive.max_seconds) == (256 * 1024**2, 100_000, 30.0)
    assert (
        load_settings(overrides={"archive": {"max_expanded_bytes": "2MiB"}}).archive.max_expanded_bytes == 2 * 1024**2
    )
    for field, value, needle in [
        ("max_expanded_bytes", 1000, "greater than or equal"),
        ("max_members", 0, "greater than or equal"),
        ("max_seconds", 0, "greater than"),
        ("max_seconds", 7200, "less than or equal"),
    ]:
        with pytest.raises(ConfigError, match=rf"(?s)archive\.{field}: .*{needle}"):
            load_settings(overrides={"archive": {field: value}})
