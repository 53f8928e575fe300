"""``spladekit.json``, what a saved spladekit model records beside its weights, and the rescaling record a model
folder's ``config.json`` carries: read and checked, every bad value an error naming the file."""

from __future__ import annotations

from pathlib import Path

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import describe, expect, read_json
from spladekit.model.head import CONFIG_ATTRIBUTE, RESCALE_MODES, parse_k

METADATA_FILE = "spladekit.json"

# spladekit.json values read back, with their JSON types (absent or null: not recorded).
METADATA_TYPES: dict[str, type | tuple[type, ...]] = {
    "max_length": int,
    "query_max_length": int,
    "backbone": str,
    "spladekit_version": str,
    "rescale": dict,
    "pooling": str,
    "head": dict,
}


def read_metadata(folder: Path) -> dict:
    """``spladekit.json`` of a saved model (``{}`` when absent): a JSON object whose known values have their
    types and a positive ``max_length`` / ``query_max_length``; anything else is an :class:`InputError` naming
    the file."""
    path = folder / METADATA_FILE
    if not path.is_file():
        return {}
    metadata = read_json(path, dict)
    for key, kinds in METADATA_TYPES.items():
        if metadata.get(key) is not None:
            expect(metadata[key], kinds, f"{key!r}", path)
    for key in ("max_length", "query_max_length"):
        if metadata.get(key) is not None and metadata[key] < 1:
            raise InputError(f"{key!r} must be a positive integer, got {metadata[key]}", path)
    return metadata


def check_rescale_record(record: object, config_file: Path) -> None:
    """The rescaling a model folder records in its ``config.json`` (``spladekit_rescale``): absent, or
    ``{"k": positive number, "mode": "tied" | "untie", "rescale_bias": bool}``."""
    if record is None:
        return
    what = f"{CONFIG_ATTRIBUTE!r}"
    expect(record, dict, what, config_file)
    assert isinstance(record, dict)  # for mypy: expect() raised otherwise
    try:
        parse_k(record.get("k"))
    except SpladekitError as error:
        raise InputError(f"{what}: {error}", config_file) from None
    if record.get("mode") not in RESCALE_MODES:
        raise InputError(
            f"{what}: mode must be one of {', '.join(RESCALE_MODES)}, got {describe(record.get('mode'))}", config_file
        )
    expect(record.get("rescale_bias"), bool, f"{what}: rescale_bias", config_file)
