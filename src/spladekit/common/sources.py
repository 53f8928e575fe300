"""Where assets come from: the "local path or remote id" rule, the offline assets folder, and what a
failed download means (models and data alike).

A model argument is a local folder or a Hugging Face hub id (``owner/name``); a data argument is a local
folder, an ir_datasets id (``beir/scifact/test``) or a HF dataset id. An argument is local when it exists,
or when it is written as a path (``./``, ``../``, ``/``, ``~``) — then a missing folder is reported as
missing instead of being sent to the hub.

A remote asset is read through its library's cache (Hugging Face: ``HF_HUB_CACHE``, default
``$HF_HOME/hub``; ir_datasets: ``IR_DATASETS_HOME``, default ``~/.ir_datasets``). When it is not cached and
cannot be downloaded (``HF_HUB_OFFLINE=1``, no network), the libraries raise a dozen different errors
(``LocalEntryNotFoundError`` wrapped in an ``OSError``, ``OfflineModeIsEnabled``, ``ConnectionError``,
``requests.ConnectionError``, ``httpx2.ConnectError``…); :func:`fetching` is the one place that turns all
of them into an :class:`InputError` naming the id, the cache folder and how to use a local copy instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from spladekit.common.errors import InputError

PATH_PREFIXES = (".", "/", "~")
SHARED_FOLDER = "shared"
Library = Literal["hub", "ir_datasets"]


def cache_root() -> Path:
    """Where spladekit keeps derived data (encoded evaluation corpora, training-data stores): ``$SPLADEKIT_CACHE``,
    default ``~/.cache/spladekit``."""
    return Path(os.environ.get("SPLADEKIT_CACHE") or Path.home() / ".cache" / "spladekit")


def is_local(spec: str | Path) -> bool:
    """True for an existing path or one written as a path; False for what can only be a remote id."""
    text = str(spec)
    return isinstance(spec, Path) or Path(text).expanduser().exists() or text.startswith(PATH_PREFIXES)


def is_local_model(spec: str | Path) -> bool:
    """:func:`is_local`, or a name with more than one '/', which no hub model id (``owner/name``) has."""
    return is_local(spec) or str(spec).count("/") > 1


def shared_folder() -> Path | None:
    """The offline assets folder ``shared`` beside the repository root of a source checkout, or None.

    Found from this file (``ROOT/src/spladekit/common/sources.py``), not from the current directory, so that
    ``spladekit quickstart`` picks the same assets from any directory; an installed package (no
    ``pyproject.toml`` two folders above its ``spladekit/``) never looks outside itself.
    """
    root = Path(__file__).resolve().parents[3]
    folder = root.parent / SHARED_FOLDER
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


# ----------------------------------------------------------------------------------------- downloads
def hub_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def ir_datasets_home() -> str:
    return str(Path(os.environ.get("IR_DATASETS_HOME") or Path.home() / ".ir_datasets"))


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, the ones it was raised from or while handling (libraries wrap the cause), and the errors it
    carries in its arguments (ir_datasets: ``RuntimeError('All download sources failed', [(source, error)…])``)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        carried = [item for arg in current.args for item in (arg if isinstance(arg, (list, tuple)) else [arg])]
        carried = [part for item in carried for part in (item if isinstance(item, tuple) else (item,))]
        pending += [
            link for link in (current.__cause__, current.__context__, *carried) if isinstance(link, BaseException)
        ]


def _unreachable(error: BaseException) -> bool:
    """True when ``error`` means "not cached here and the source cannot be reached"."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    offline: tuple[type[BaseException], ...] = (
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        ConnectionError,
        TimeoutError,
        socket.gaierror,
    )
    with contextlib.suppress(ImportError):
        import requests

        offline += (requests.ConnectionError, requests.Timeout)
    for client in ("httpx", "httpx2"):  # huggingface_hub 2.x talks through httpx2
        with contextlib.suppress(ImportError):
            offline += (importlib.import_module(client).TransportError,)
    return any(isinstance(link, offline) for link in _chain(error))


def _repository_missing(error: BaseException) -> bool:
    from huggingface_hub.errors import RepositoryNotFoundError

    return any(isinstance(link, RepositoryNotFoundError) for link in _chain(error))


def _offline_reason(library: Library) -> str:
    from huggingface_hub import constants

    if library == "hub" and constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    return "no network"


@contextlib.contextmanager
def fetching(spec: str, library: Library, local_copy: str) -> Iterator[None]:
    """Inside this block, a failed download of ``spec`` becomes one :class:`InputError` line.

    ``library`` says whose cache holds it (``hub``: Hugging Face models and datasets; ``ir_datasets``);
    ``local_copy`` says what to pass instead (e.g. "a local model folder"). Other errors pass unchanged.
    """
    try:
        yield
    except Exception as error:
        if library == "hub" and _repository_missing(error):
            raise InputError(
                f"{spec}: no such repository on the Hugging Face hub (or it is private or gated: "
                f"log in with `hf auth login`); or pass {local_copy}"
            ) from None
        if not _unreachable(error):
            raise
        if library == "hub":
            where = f"the Hugging Face cache {hub_cache()} (HF_HUB_CACHE, or HF_HOME/hub)"
        else:
            where = f"the ir_datasets home {ir_datasets_home()} (IR_DATASETS_HOME)"
        raise InputError(
            f"{spec}: not in {where} and cannot be downloaded ({_offline_reason(library)}); "
            f"download it once where there is a network, point the variable at a folder that "
            f"holds it, or pass {local_copy}"
        ) from None
