"""serve: a model (and an index) behind HTTP, text-embeddings-inference's API, on FastAPI + uvicorn."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app
from spladekit.cli.core import checked_device, chosen_precision
from spladekit.cli.options import BF16, DEVICE, PRECISION, TRUST_REMOTE_CODE, option
from spladekit.common.errors import SpladekitError

SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")


def check_serve_packages() -> None:
    missing = [name for name in SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise SpladekitError(
            f"spladekit serve needs {', '.join(missing)}: install the serve extra (pip install 'spladekit[serve]')"
        )


@app.command()
def serve(
    model: str = typer.Argument(
        ...,
        help="What to serve: a spladekit model folder, an inference-free model, a sentence-transformers SPLADE or "
        "Router folder, an exported ONNX folder (run by onnxruntime on the CPU) or a hub id.",
    ),
    index: Optional[Path] = typer.Option(
        None,
        help="Index folder written by `spladekit index` (any backend), searched by POST /search; opened read-only. "
        "It must have been encoded with MODEL's vocabulary.",
    ),
    collection: Optional[str] = typer.Option(
        None,
        help="The indexed documents' text, shown with hits and re-encoded to explain them: a JSONL corpus, a BEIR "
        "folder, a Hugging Face or ir_datasets id. Needs --index.",
    ),
    host: str = typer.Option(
        "127.0.0.1",
        help="Address to listen on. Loopback by default; any other address needs --api-key (or "
        "--allow-unauthenticated).",
    ),
    port: int = typer.Option(8080, min=1, max=65535, help="TCP port to listen on."),
    api_key: Optional[str] = typer.Option(
        None,
        "--api-key",
        envvar="SPLADEKIT_API_KEY",
        show_envvar=True,
        help="Require `Authorization: Bearer KEY` on every route but /health and the page's shell. Prefer the "
        "environment variable: a command line is visible to other users of the machine.",
    ),
    allow_unauthenticated: bool = typer.Option(
        False,
        "--allow-unauthenticated",
        help="Serve on a non-loopback --host without an API key (only on a network you trust).",
    ),
    cors_origin: list[str] = typer.Option(
        [],
        "--cors-origin",
        help="Let pages from this origin call the API from a browser (repeat for several; `*` for any). "
        "Default: no cross-origin access.",
    ),
    max_client_batch_size: int = typer.Option(
        32, min=1, help="Most inputs one request may send (more: 422, as TEI's option of the same name)."
    ),
    max_concurrent_requests: int = typer.Option(
        512,
        min=1,
        help="Most inputs admitted at once, queued or encoding; beyond it requests get 429 with Retry-After.",
    ),
    max_batch_tokens: int = typer.Option(
        16384, min=1, help="Token budget of one forward pass: concurrent requests are gathered up to it."
    ),
    max_batch_requests: Optional[int] = typer.Option(
        None, min=1, help="Most inputs in one forward pass (default: only the token budget limits it)."
    ),
    batch_wait_ms: float = typer.Option(
        30.0,
        min=0.0,
        help="The longest a forward pass waits for requests on the way: still being read or tokenized, or the "
        "clients the previous pass answered coming back (never longer than that pass took; one client never "
        "waits). 0: start with whatever is queued, as TEI does.",
    ),
    payload_limit: int = typer.Option(
        2_000_000, min=1, help="Largest request body in bytes (larger: 413, before it is read)."
    ),
    auto_truncate: bool = typer.Option(
        True,
        "--auto-truncate/--no-auto-truncate",
        help="What a request without `truncate` gets: cut inputs at the token limit, or refuse them with 422.",
    ),
    max_search_hits: int = typer.Option(1000, min=1, help="Largest k a POST /search may ask for."),
    served_model_name: Optional[str] = typer.Option(None, help="The name /info reports (default: MODEL as given)."),
    graceful_timeout: int = typer.Option(
        30,
        min=0,
        help="On SIGTERM or Ctrl-C, how many seconds requests in flight may take to finish before the server stops.",
    ),
    access_log: bool = typer.Option(False, "--access-log", help="Log every request (uvicorn's access log)."),
    pooling: str = option("auto", "--pooling"),
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
) -> None:
    """Serve a SPLADE model over HTTP with text-embeddings-inference's API (POST /embed_sparse, /tokenize, GET
    /info, /health, /metrics), dynamic batching, POST /search with explanations when --index is given, and a
    search page at / (docs/serving.md)."""
    from spladekit.serve.settings import ServeSettings, bound_primitive_cache, check_exposure

    checked_device(device)
    precision = chosen_precision(precision, bf16)
    from spladekit.model.encoder import check_pooling

    check_pooling(pooling)
    check_exposure(host, api_key, allow_unauthenticated)
    if collection is not None and index is None:
        raise SpladekitError("--collection gives the text of indexed documents: it needs --index")
    settings = ServeSettings(
        max_client_batch_size=max_client_batch_size,
        max_concurrent_requests=max_concurrent_requests,
        max_batch_tokens=max_batch_tokens,
        max_batch_requests=max_batch_requests,
        batch_wait_ms=batch_wait_ms,
        payload_limit=payload_limit,
        auto_truncate=auto_truncate,
        max_search_hits=max_search_hits,
        api_key=api_key,
        cors_origins=tuple(cors_origin),
        served_model_name=served_model_name,
    )
    check_serve_packages()
    if index is not None:  # a bad folder fails before the model is loaded
        from spladekit.index.store import read_manifest

        read_manifest(index, verify_files=False)

    import uvicorn

    bound_primitive_cache()  # before the model's first matmul: oneDNN reads it once
    from spladekit.serve.app import create_app
    from spladekit.serve.encoding import load_served_model
    from spladekit.serve.search import SearchService

    served = load_served_model(
        model, device=device, trust_remote_code=trust_remote_code, precision=precision, pooling=pooling
    )
    search = None
    if index is not None:
        search = SearchService.open(str(index), model, served.vocab_size, collection)
    application = create_app(served, search, settings, model_id=model)
    # uvicorn drains on SIGTERM / SIGINT, then raises the signal again with the handlers it found: these turn it into
    # a normal end (exit 0, the index closed) instead of a death by signal
    previous = {number: signal.signal(number, _stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvicorn.run(
            application,
            host=host,
            port=port,
            log_level="info",
            access_log=access_log,
            timeout_graceful_shutdown=graceful_timeout,
            server_header=False,
        )
    except ServerStopped:
        pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if search is not None:
            search.close()


class ServerStopped(Exception):
    """A stop signal, after uvicorn drained the requests in flight."""


def _stop(number: int, frame: object) -> None:
    raise ServerStopped()
