"""Reversible escaping of token strings used as feature names in OpenSearch / Elasticsearch.

Both engines reject a ``.`` inside a ``rank_features`` / ``sparse_vector`` feature name ("fields do not
support dots in feature names"): a dot would be read as an object path. spladekit percent-escapes the two
characters that matter, and nothing else:

* ``%`` → ``%25`` (first, so the escape is unambiguous)
* ``.`` → ``%2E``

Every other character (``##`` word pieces, ``Ġ``/``▁`` markers, non-ASCII) is kept as is. The inverse
replaces exactly those two sequences, so ``unescape_feature(escape_feature(t)) == t`` for every string t,
and an escaped name never contains a dot. Escape query tokens the same way before searching.
"""

from __future__ import annotations

import re

_ESCAPES = {"%": "%25", ".": "%2E"}
_UNESCAPES = {escaped: raw for raw, escaped in _ESCAPES.items()}
_ESCAPE_PATTERN = re.compile("[%.]")
_UNESCAPE_PATTERN = re.compile("%25|%2E")


def escape_feature(token: str) -> str:
    """A feature name the engines accept (no ``.``), from which :func:`unescape_feature` recovers ``token``."""
    return _ESCAPE_PATTERN.sub(lambda match: _ESCAPES[match.group()], token)


def unescape_feature(name: str) -> str:
    """Inverse of :func:`escape_feature`."""
    return _UNESCAPE_PATTERN.sub(lambda match: _UNESCAPES[match.group()], name)
