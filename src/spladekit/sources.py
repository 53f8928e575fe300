"""The one rule for "is this argument a local path or a remote id?" (models and data alike).

A model argument is a local folder or a Hugging Face hub id (``owner/name``); a data argument is a local
folder, an ir_datasets id (``beir/scifact/test``) or a HF dataset id. An argument is local when it exists,
or when it is written as a path (``./``, ``../``, ``/``, ``~``) — then a missing folder is reported as
missing instead of being sent to the hub.
"""

from __future__ import annotations

from pathlib import Path

PATH_PREFIXES = (".", "/", "~")


def is_local(spec: str | Path) -> bool:
    """True for an existing path or one written as a path; False for what can only be a remote id."""
    text = str(spec)
    return isinstance(spec, Path) or Path(text).expanduser().exists() or text.startswith(PATH_PREFIXES)


def is_local_model(spec: str | Path) -> bool:
    """:func:`is_local`, or a name with more than one '/', which no hub model id (``owner/name``) has."""
    return is_local(spec) or str(spec).count("/") > 1
