"""What ``Client``/``AsyncClient`` take as the service's address: a malformed or unsupported url is bad input,
said at once with the accepted forms, never "no service answers"."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.client import AsyncClient, Client
from executor.errors import ConfigError, ServiceUnavailable

pytestmark = [pytest.mark.timeout(30)]

_FORMS = r"give unix:///PATH \(the socket\), http://HOST:PORT or https://HOST\[:PORT\]$"


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "http://", "unix://relative/service.sock", "", "http://[::1"])
def test_a_url_of_no_accepted_form_is_bad_input_naming_the_forms(url: str) -> None:
    """ftp://, a word, a scheme without a host and a relative unix path raise ConfigError (a ValueError)."""
    for client in (Client, AsyncClient):
        with pytest.raises(ConfigError, match=_FORMS) as raised:
            client(url=url)
        assert isinstance(raised.value, ValueError) and not isinstance(raised.value, ServiceUnavailable)


def test_accepted_urls_make_a_client_and_a_missing_socket_is_no_service(tmp_path: Path) -> None:
    """http, https and unix:///PATH are taken; a unix url naming no socket says no service answers there."""
    for url in ("http://127.0.0.1:8766", "https://executor.example:443/", "http://[::1]:8766"):
        Client(url=url).close()
    missing = tmp_path / "service.sock"
    with Client(url=f"unix://{missing}") as client, pytest.raises(ServiceUnavailable, match=f"at {missing}: start"):
        client.health()
    with pytest.raises(ConfigError, match="not both"):
        Client(url="http://127.0.0.1:1", socket=missing)
