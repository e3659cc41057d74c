#!/usr/bin/env bash
# Register gVisor's runsc with the local Docker engine as the runtime `runsc`, idempotently.
#
# usage: register-runsc.sh [--install] [--config FILE] [--runsc PATH] [--no-reload]
#
#   --install     apt-get install Debian's `runsc` package when no runsc binary is found
#   --config      the engine's daemon.json (default /etc/docker/daemon.json)
#   --runsc       the runsc binary (default: the one on PATH)
#   --no-reload   only write daemon.json (for an engine that is about to be started)
#
# The runtime entry is `{"path": RUNSC, "runtimeArgs": ["--network=none", "--oci-seccomp"]}` under the `runtimes`
# key: this runsc (Debian's, 2022) cannot set up a container without a network unless told so (session containers
# have none), and applies a container's seccomp profile inside the sandbox only with --oci-seccomp (the executor
# refuses a runsc registered without both: executor/sandbox/docker/hardening.py RUNSC_ARGS).
# Every other key of daemon.json is kept as it was; the file is rewritten only when the entry differs.
# A running dockerd is then sent SIGHUP, which reloads `runtimes` without stopping any container (never a restart),
# and the script waits (bounded) until `docker info` lists the runtime. Exit 0 when the engine has it (or, with
# --no-reload, when the file has it); nonzero with a reason on stderr.
set -euo pipefail

config=/etc/docker/daemon.json runsc="" install=0 reload=1
while [ $# -gt 0 ]; do
    case "$1" in
        --install) install=1; shift ;;
        --config) config="$2"; shift 2 ;;
        --runsc) runsc="$2"; shift 2 ;;
        --no-reload) reload=0; shift ;;
        *) echo "register-runsc.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ -z "$runsc" ]; then runsc=$(command -v runsc || true); fi
if [ -z "$runsc" ] && [ "$install" = 1 ]; then
    echo "register-runsc.sh: installing Debian's runsc package" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null
    runsc=$(command -v runsc || true)
fi
if [ -z "$runsc" ] || [ ! -x "$runsc" ]; then
    echo "register-runsc.sh: no runsc binary found; install Debian's runsc package (apt-get install runsc)" \
        "or pass --runsc PATH" >&2
    exit 1
fi

# Merge with python3 (always there where the executor runs): a JSON edit, not a text edit.
changed=$(python3 - "$config" "$runsc" <<'EOF'
import json, os, sys, tempfile

path, runsc = sys.argv[1], sys.argv[2]
try:
    with open(path, encoding="utf-8") as f:
        text = f.read()
except FileNotFoundError:
    text = ""
try:
    settings = json.loads(text) if text.strip() else {}
except ValueError as exc:
    sys.exit(f"register-runsc.sh: {path} is not valid JSON ({exc}); fix it first")
if not isinstance(settings, dict):
    sys.exit(f"register-runsc.sh: {path} does not hold a JSON object; fix it first")
entry = {"path": runsc, "runtimeArgs": ["--network=none", "--oci-seccomp"]}
runtimes = settings.setdefault("runtimes", {})
if not isinstance(runtimes, dict):
    sys.exit(f"register-runsc.sh: {path}: 'runtimes' is not an object; fix it first")
if runtimes.get("runsc") == entry:
    print("unchanged")
    sys.exit(0)
runtimes["runsc"] = entry
folder = os.path.dirname(os.path.abspath(path))
os.makedirs(folder, exist_ok=True)
mode = os.stat(path).st_mode & 0o7777 if text else 0o644
fd, staging = tempfile.mkstemp(dir=folder, prefix=".daemon.json.")
with os.fdopen(fd, "w", encoding="utf-8") as f:
    json.dump(settings, f, indent=2)
    f.write("\n")
os.chmod(staging, mode)
os.replace(staging, path)
print("changed")
EOF
)
echo "register-runsc.sh: $config $changed (runsc at $runsc)" >&2

[ "$reload" = 1 ] || exit 0

has_runtime() { docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null | grep -qw runsc; }
if has_runtime && [ "$changed" = unchanged ]; then exit 0; fi

pid=""
if [ -r /var/run/docker.pid ]; then pid=$(cat /var/run/docker.pid); fi
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then pid=$(pgrep -x dockerd | head -n 1 || true); fi
if [ -z "$pid" ]; then
    echo "register-runsc.sh: no dockerd is running; it reads $config when it starts" >&2
    exit 0
fi
kill -HUP "$pid"
for _ in $(seq 1 60); do
    if has_runtime; then echo "register-runsc.sh: the engine lists runtime runsc" >&2; exit 0; fi
    sleep 0.5
done
echo "register-runsc.sh: dockerd (pid $pid) was sent SIGHUP but does not list runsc after 30 s; see its log" >&2
exit 1
