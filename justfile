# The executor's tasks. The README's quick start is `just run` and `just test`.

set shell := ["bash", "-euo", "pipefail", "-c"]

venv := ".venv"
py := venv / "bin/python"
exe := venv / "bin/executor"

# List the recipes.
default:
    @just --list

# Create the virtual environment, install exactly what requirements.lock pins (hashes checked), build the agent.
setup:
    @if [ ! -x {{py}} ]; then echo "==> creating {{venv}}"; python3 -m venv {{venv}}; fi
    @if [ ! -e {{venv}}/.installed ] || [ requirements.lock -nt {{venv}}/.installed ] || [ pyproject.toml -nt {{venv}}/.installed ]; then \
        echo "==> installing the locked dependencies (requirements.lock) and the executor into {{venv}}"; \
        {{py}} -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements.lock \
        && {{py}} -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . --config-settings editable_mode=compat \
        && touch {{venv}}/.installed; fi
    @# The editable install is a plain path entry (compat): setuptools' default finder imported pathlib, re and more
    @# at every interpreter start (about 30 ms before any CLI call began; a wheel install has none). And an editable
    @# install compiles no bytecode (a wheel's does) while PYTHONDONTWRITEBYTECODE stops the interpreter caching it:
    @# every CLI call then compiled the executor's modules anew. Up-to-date files are skipped here.
    @{{py}} -m compileall -q -j 0 executor
    @echo "==> building the in-container agent"
    @{{exe}} agent build

# Re-resolve requirements.lock from pyproject.toml (keeps every pin it can; `just lock --upgrade` takes the newest).
lock *args: setup
    {{venv}}/bin/uv pip compile pyproject.toml --extra dev --extra inspect --generate-hashes --universal \
        --python-version 3.11 --custom-compile-command "just lock" --quiet -o requirements.lock {{args}}

# Fail when requirements.lock is not what `just lock` makes from pyproject.toml now (CI runs it).
lock-check: setup
    @tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT && cp requirements.lock "$tmp/requirements.lock" \
        && {{venv}}/bin/uv pip compile pyproject.toml --extra dev --extra inspect --generate-hashes --universal \
            --python-version 3.11 --custom-compile-command "just lock" --quiet -o "$tmp/requirements.lock" \
        && if ! diff -u requirements.lock "$tmp/requirements.lock"; then \
            echo "requirements.lock does not match pyproject.toml: run 'just lock' and commit requirements.lock" >&2; exit 1; \
        else echo "==> requirements.lock matches pyproject.toml"; fi

# Build the session image `base` (bootstraps a Debian root filesystem offline when needed).
image name="base": setup host-tools
    @echo "==> session image {{name}}"
    @{{exe}} image build {{name}}

# The host tool that bootstraps a Debian base (mmdebstrap): installed with apt where this user can, else named.
host-tools:
    @if ! command -v mmdebstrap >/dev/null 2>&1 && ! command -v debootstrap >/dev/null 2>&1; then \
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
            echo "==> installing mmdebstrap (bootstraps session image bases from this host's apt sources)"; \
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; \
        else \
            echo "note: no mmdebstrap: a session image whose base is missing cannot be bootstrapped; run: sudo apt-get install mmdebstrap" >&2; \
        fi; \
    fi

# Install gVisor's runsc (Debian's package) and register it with the local Docker engine (root; SIGHUP, no restart).
runsc:
    images/register-runsc.sh --install

# The main job on the embedded defaults: a scripted agent task, narrated.
run: (image "base")
    @{{exe}} demo

# The whole test suite, against the real Docker engine.
test *args: (image "base")
    @echo "==> tests"
    @{{py}} -m pytest {{args}}

# The tests that need no engine, run with none reachable: each test that needs one must carry the docker marker.
test-no-engine *args: setup
    @echo "==> tests marked as needing no Docker engine, with none reachable"
    @env -u EXECUTOR_DOCKER__BASE_URL DOCKER_HOST=unix:///nonexistent/docker.sock {{py}} -m pytest -m "not docker" {{args}}

# Lint, types and import layering.
lint: setup
    {{venv}}/bin/ruff check executor tests
    {{venv}}/bin/ruff format --check executor tests
    {{venv}}/bin/mypy
    {{venv}}/bin/lint-imports

# Benchmarks, printed side by side with the raw Docker baseline.
bench *args: (image "base")
    @{{py}} -m tests.benchmarks {{args}}

# Regenerate the README's settings table from the settings model.
docs:
    @{{py}} -c "import re, pathlib; from executor.config import settings_table as t; p = pathlib.Path('README.md'); s = p.read_text(); p.write_text(re.sub(r'(<!-- settings-table:start -->\n).*?(<!-- settings-table:end -->)', lambda m: m.group(1) + t() + '\n' + m.group(2), s, flags=re.S))"

# The executor's own image (MCP server over HTTP), built offline on the `toolchain` session image.
server-image: (image "toolchain")
    @echo "==> wheels for the executor and its dependencies (build/wheels)"
    @rm -rf build/wheels && {{py}} -m pip wheel --quiet --disable-pip-version-check -w build/wheels .
    @echo "==> docker build executor/server (no network)"
    @DOCKER_BUILDKIT=0 docker build --quiet --network none -t executor/server .
