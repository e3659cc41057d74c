"""The executor as a service (``executor serve``): the ``/v1`` JSON API, its OpenAPI document, metrics and the
MCP endpoint, over one long-lived owner of a home's sessions, artifacts and journals.

Modules: :mod:`~executor.service.wire` (the request/response models; pure, shared with :mod:`executor.client`),
:mod:`~executor.service.openapi`, :mod:`~executor.service.core` (sessions held, work, approvals, metrics),
:mod:`~executor.service.app` (the ASGI app) and :mod:`~executor.service.server` (``serve``). This package's
``__init__`` imports nothing, so the client can use the wire models without trio.
"""

__all__: list[str] = []
