"""text-embeddings-inference's HTTP shapes: requests, responses and errors, as its ``docs/openapi.json`` and
``router/src/http/server.rs`` define them (huggingface/text-embeddings-inference).

* ``POST /embed_sparse``: ``{"inputs": str | [str] | [int] | [[int]], "truncate": bool?, "truncation_direction":
  "Left" | "Right" (or lower case), "prompt_name": str?}`` → ``[[{"index": int, "value": float}, …], …]`` (one list
  per input, zero weights dropped, indices ascending). spladekit's extensions are optional fields: ``side``,
  ``top_k``, ``threshold``, ``return_tokens``, ``format`` (:class:`EmbedSparseRequest`).
* ``POST /tokenize``: ``{"inputs": str | [str], "add_special_tokens": bool = true}`` →
  ``[[{"id", "text", "special", "start", "stop"}, …], …]`` (``start``/``stop``: UTF-8 byte offsets, null for
  special tokens).
* Errors: ``{"error": str, "error_type": "Unhealthy" | "Backend" | "Overloaded" | "Validation" | "Tokenizer" |
  "Empty"}`` with TEI's status per type (:data:`STATUS`): Empty 400, Validation and Tokenizer 422, Overloaded 429,
  Backend 424, Unhealthy 503. TEI serializes the type as its Rust variant name (capitalized), as here.

Bodies are read by :func:`parse_body` (strict UTF-8, JSON, then the model), so that every malformed request gets
the error shape: a JSON syntax error or a body that is not UTF-8 is 400 and a body of the wrong shape 422, the
statuses TEI's web framework (axum) gives them.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

ErrorType = Literal["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"]
STATUS: dict[str, int] = {
    "Unhealthy": 503,
    "Backend": 424,
    "Overloaded": 429,
    "Tokenizer": 422,
    "Validation": 422,
    "Empty": 400,
}
EMPTY_INPUTS = "`inputs` cannot be empty"
OVERLOADED = "Model is overloaded"

TokenId = Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)]
InputType = Union[StrictStr, list[TokenId]]
FORMATS = ("tei", "opensearch", "qdrant")


class TeiError(Exception):
    """A request refused with TEI's error body; ``status`` defaults to TEI's status for ``error_type``."""

    def __init__(
        self, error: str, error_type: ErrorType, status: int | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(error)
        self.error, self.error_type = error, error_type
        self.status = STATUS[error_type] if status is None else status
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": self.error, "error_type": self.error_type}


class EmbedSparseRequest(BaseModel):
    """TEI's ``EmbedSparseRequest`` and spladekit's optional extensions (unknown fields are ignored, as TEI's
    serde does)."""

    model_config = ConfigDict(extra="ignore")

    inputs: Union[InputType, list[InputType]]
    truncate: Union[StrictBool, None] = None
    truncation_direction: Literal["Left", "Right", "left", "right"] = "Right"
    prompt_name: Union[StrictStr, None] = None
    # spladekit extensions
    side: Literal["query", "document"] = Field(
        "document", description="Encode as queries (the query token limit; inference-free models: the weight table)."
    )
    top_k: Union[Annotated[int, Field(strict=True, ge=1)], None] = Field(None, description="Keep the k heaviest.")
    threshold: Union[Annotated[float, Field(ge=0, allow_inf_nan=False)], None] = Field(
        None, description="Drop weights below this value."
    )
    return_tokens: StrictBool = Field(False, description="Add each index's vocabulary token.")
    format: Literal["tei", "opensearch", "qdrant"] = Field(
        "tei",
        description="tei: [{index, value}]; opensearch: {token: weight} (feature names escaped); "
        "qdrant: {indices, values}.",
    )


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    inputs: Union[StrictStr, list[StrictStr]]
    add_special_tokens: StrictBool = True
    prompt_name: Union[StrictStr, None] = None


class SearchRequest(BaseModel):
    """``POST /search`` (spladekit's own route): a query, the hits wanted, whether to explain them."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr
    k: Annotated[int, Field(strict=True, ge=1)] = 10
    explain: StrictBool = False
    truncate: Union[StrictBool, None] = None


Parsed = TypeVar("Parsed", bound=BaseModel)


def parse_body(body: bytes, model: type[Parsed]) -> Parsed:
    """``body`` as ``model``, or a :class:`TeiError`: 400 for bytes that are not UTF-8 JSON, 422 for JSON of the
    wrong shape (the message names the first field at fault)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TeiError(
            f"Failed to parse the request body as JSON: not UTF-8 ({error.reason})", "Validation", 400
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise TeiError(f"Failed to parse the request body as JSON: {error}", "Validation", 400) from None
    except RecursionError:  # arrays nested deeper than Python's stack
        raise TeiError("Failed to parse the request body as JSON: nested too deeply", "Validation", 400) from None
    try:
        return model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise TeiError(
            f"Failed to deserialize the JSON body into the target type: {where}: {first['msg']}{more}", "Validation"
        ) from None
