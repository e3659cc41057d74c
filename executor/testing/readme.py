"""The README's service section read as data: the API table's routes, the app's routes, the curl quick start."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import cast

__all__ = ["api_table_routes", "app_routes", "service_curl_block"]

_ROUTE = re.compile(r"`((?:GET|POST|PUT|DELETE)(?:/(?:GET|POST|PUT|DELETE))*) (/v1/[^`?\[]*)(\[/[a-z]+\])?")


def _service_section(readme: str) -> str:
    return readme.split("## Service (`executor serve`)", 1)[1].split("\n## ", 1)[0]


def api_table_routes(readme: str) -> set[tuple[str, str]]:
    """(method, path) of every route the service section's table names; ``{id or name}`` reads as ``{session}``,
    ``GET/POST /a`` as both methods, ``/a[/search]`` as both paths."""
    routes: set[tuple[str, str]] = set()
    for line in _service_section(readme).splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split(" | ")[0]
        for methods, path, optional in _ROUTE.findall(cell):
            path = re.sub(r"\{id or name\}|\{s\}", "{session}", path.rstrip())
            path = path.replace("{a}", "{artifact}").replace("{t}", "{task}").replace("{id}", "{approval}")
            paths = [path] + ([path + optional.strip("[]")] if optional else [])
            for method in methods.split("/"):
                routes.update((method, each) for each in paths)
    return routes


def app_routes() -> set[tuple[str, str]]:
    """(method, path) of every route of the service's ASGI app (built over a stand-in: routes need no service)."""
    from starlette.routing import Route

    from executor.service.app import build_app
    from executor.service.core import Service

    stand_in = cast(Service, SimpleNamespace(svc=SimpleNamespace(tokens=()), settings=None))
    app = build_app(stand_in)
    routes: set[tuple[str, str]] = set()
    for route in app._app.routes:  # type: ignore[attr-defined]  # the auth wrapper's starlette app
        if isinstance(route, Route):
            routes.update((method, route.path) for method in route.methods or () if method != "HEAD")
    return routes


def service_curl_block(readme: str) -> str:
    """The service quick start's bash block, less the lines that set the home and start the service."""
    block = _service_section(readme).split("Quick start:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    kept = [line for line in block.splitlines() if not line.startswith(("export EXECUTOR_HOME", "executor serve"))]
    return "\n".join(kept) + "\n"
