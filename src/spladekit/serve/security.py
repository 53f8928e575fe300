"""The API key: ``Authorization: Bearer KEY`` on every request but the public ones, compared in constant time.

Public without a key: ``GET /health`` (load balancers probe it) and ``GET /``, the page's static shell, which holds
no data: the page asks for the key and sends it with every call it makes (``/info``, ``/search``,
``/embed_sparse``). A refused request gets 401 with an empty body and ``WWW-Authenticate: Bearer``, as
text-embeddings-inference answers (its auth layer returns a bare 401).
"""

from __future__ import annotations

import hmac
from typing import Any

PUBLIC_ROUTES = frozenset({("GET", "/health"), ("HEAD", "/health"), ("GET", "/"), ("HEAD", "/")})


def authorized(header: bytes | None, expected: bytes) -> bool:
    """Whether an ``Authorization`` header value is ``expected`` (``b"Bearer KEY"``), in time independent of where
    they differ (:func:`hmac.compare_digest`)."""
    return header is not None and hmac.compare_digest(header, expected)


class ApiKeyMiddleware:
    """ASGI middleware refusing every non-public HTTP request without the key (CORS preflights are answered by
    the CORS layer outside it)."""

    def __init__(self, app: Any, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in PUBLIC_ROUTES:
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        if authorized(header, self.expected):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})
