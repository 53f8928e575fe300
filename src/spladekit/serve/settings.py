"""What a server accepts and how it batches: every limit of ``spladekit serve`` in one frozen dataclass.

The names and defaults follow text-embeddings-inference's router options (``router/src/main.rs``):
``max_client_batch_size`` 32 inputs a request, ``max_concurrent_requests`` 512 inputs admitted at once (queued or
encoding; beyond it a request is refused with 429), ``max_batch_tokens`` 16384 tokens a forward pass,
``payload_limit`` 2,000,000 bytes a request body, ``auto_truncate`` on, and an input may hold at most
``max_input_length × 250`` characters (TEI's ``MAX_CHAR_MULTIPLIER``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from spladekit.common.errors import SpladekitError

MAX_CHAR_MULTIPLIER = 250  # TEI: an input's characters are capped at max_input_length × 250 before tokenizing
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
# oneDNN's primitive cache, and ideep's cache of the objects torch's oneDNN ops build around those primitives
PRIMITIVE_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
SERVED_PRIMITIVE_CACHE = 8


def bound_primitive_cache() -> None:
    """Cap oneDNN's primitive caches for a serving process (``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` and ideep's
    ``LRU_CACHE_CAPACITY``, each unless already set).

    Why: oneDNN, behind torch's bf16 matmuls on a CPU (the head's bf16 screen), keeps one compiled primitive per
    matmul shape, and ideep (torch's wrapper of oneDNN) one cached object per shape too, up to 1,024 each by default;
    a server meets a new shape with almost every batch (its size and padded length vary with the traffic). Under
    overload the server's memory then grew for minutes, in steps the size of the model's bf16 vocabulary matrix; with
    both caps small it stayed flat in the runs measured (docs/serving.md, "Memory under overload": the runs, and what
    the caps cost).
    Both are read once, when the first primitive is built: call this before the process's first matmul (``spladekit
    serve`` does, before loading the model)."""
    for variable in PRIMITIVE_CACHE_VARIABLES:
        os.environ.setdefault(variable, str(SERVED_PRIMITIVE_CACHE))


@dataclass(frozen=True)
class ServeSettings:
    """The limits and switches of one server (the CLI's options; :func:`spladekit.serve.app.create_app`)."""

    max_client_batch_size: int = 32
    max_concurrent_requests: int = 512  # inputs admitted (queued + encoding); more → 429 Model is overloaded
    max_batch_tokens: int = 16384  # tokens (after truncation) gathered into one forward pass
    max_batch_requests: int | None = None  # inputs in one forward pass (None: only the token budget counts)
    batch_wait_ms: float = 30.0  # the longest a pass waits for requests on the way (batching.py says which)
    payload_limit: int = 2_000_000  # bytes of a request body
    auto_truncate: bool = True  # what a request without "truncate" gets (TEI's --auto-truncate)
    max_search_hits: int = 1000  # the largest k of POST /search
    api_key: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()
    served_model_name: str | None = None
    retry_after_s: int = 1  # the Retry-After header of a 429

    def __post_init__(self) -> None:
        for name in ("max_client_batch_size", "max_concurrent_requests", "max_batch_tokens", "payload_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpladekitError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_batch_requests is not None and self.max_batch_requests < 1:
            raise SpladekitError(f"max_batch_requests must be >= 1, got {self.max_batch_requests!r}")
        if self.batch_wait_ms < 0:
            raise SpladekitError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms!r}")
        if self.max_search_hits < 1:
            raise SpladekitError(f"max_search_hits must be >= 1, got {self.max_search_hits!r}")
        if self.max_client_batch_size > self.max_concurrent_requests:
            raise SpladekitError(
                f"max_client_batch_size ({self.max_client_batch_size}) is above max_concurrent_requests "
                f"({self.max_concurrent_requests}): no full request could ever be admitted"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise SpladekitError("the API key is empty")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` exposes the server to this machine only."""
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None, allow_unauthenticated: bool) -> None:
    """Refuse, in one line, to serve without a key on an address other machines can reach, unless asked to."""
    if not is_loopback(host) and api_key is None and not allow_unauthenticated:
        raise SpladekitError(
            f"--host {host} exposes the server beyond this machine without an API key: give --api-key (or "
            "SPLADEKIT_API_KEY), or --allow-unauthenticated if the network is yours"
        )
