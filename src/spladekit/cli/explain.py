"""explain: a text's top vocabulary terms, or the terms behind a query–document score."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from spladekit.cli.app import app, emit, opened, write_json
from spladekit.cli.core import checked_device, side_max_length
from spladekit.cli.options import (
    DEVICE,
    JSON_FLAG,
    JSON_OUTPUT,
    TRUST_REMOTE_CODE,
    doc_max_length_option,
    option,
    query_max_length_option,
)
from spladekit.common.errors import SpladekitError


@app.command()
def explain(
    model: str = typer.Argument(
        ...,
        help="Hub id or folder of a model (spladekit, sentence-transformers "
        "SparseEncoder, naver/splade, or any masked-LM).",
    ),
    texts: list[str] = typer.Argument(
        ...,
        metavar="TEXT [TEXT]",
        help="One text: its top terms. Two: QUERY "
        "DOCUMENT, the terms contributing to their score q·d, sorted by q_v·d_v.",
    ),
    top: int = typer.Option(20, "--top", help="How many terms (or contributions) to show; at least 1."),
    side: Optional[str] = option(
        None, "--side", detail="Here: one TEXT (default: document); a pair is always query then document."
    ),
    corpus: Optional[Path] = option(
        None, "--corpus", detail="Here: a JSONL file to take the document from (with --doc-id); TEXT is the query."
    ),
    doc_id: Optional[str] = typer.Option(None, help="Id of the document in --corpus to explain TEXT against."),
    doc_max_length: Optional[int] = doc_max_length_option(),
    query_max_length: Optional[int] = query_max_length_option(),
    html: Optional[Path] = typer.Option(
        None,
        "--html",
        help="Also write a self-contained HTML page with bar "
        "charts of the term weights (must not exist unless --overwrite).",
    ),
    device: str = DEVICE,
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
    output: Optional[Path] = JSON_OUTPUT,
    overwrite: bool = option(False, "--overwrite", detail="Here: the --json-out and --html files."),
) -> None:
    """Show what a SPLADE vector holds (top terms and weights), or why a document scores what it does for a
    query (shared terms by contribution q_v·d_v; they sum to the score)."""
    from spladekit.data.jsonl import read_document
    from spladekit.evaluation.explain import (
        check_text,
        check_top,
        explain_pair,
        explain_text,
        terminal_table,
        write_html,
    )
    from spladekit.model.encoder import check_side
    from spladekit.model.loading import load_model

    if len(texts) > 2:
        raise SpladekitError(f"explain takes one TEXT or a QUERY and a DOCUMENT, got {len(texts)} texts")
    if (corpus is None) != (doc_id is None):
        raise SpladekitError("--corpus and --doc-id go together")
    if doc_id is not None and len(texts) != 1:
        raise SpladekitError("with --corpus/--doc-id give one TEXT (the query)")
    pair = len(texts) == 2 or doc_id is not None
    if pair and side is not None:
        raise SpladekitError("--side applies to one TEXT; a pair is encoded as query then document")
    check_top(top)
    checked_device(device)
    if side is not None:
        check_side(side)
    if not pair:  # the limit of the one text's side; the other side's option is refused
        side_max_length(side or "document", doc_max_length, query_max_length)
    for number, text in enumerate(texts, start=1):
        check_text(text, ("query" if number == 1 else "document") if pair else "text")
    if output is not None and html is not None and os.path.abspath(output) == os.path.abspath(html):
        raise SpladekitError(f"{html}: --json-out and --html name the same file")

    with (
        opened(output, folder=False, overwrite=overwrite) as staged_json,
        opened(html, folder=False, overwrite=overwrite) as staged_html,
    ):
        documents = texts[1:] if doc_id is None else [read_document(corpus, doc_id)]  # type: ignore[arg-type]
        # either kind: an inference-free model's queries are its weight table
        encoder = load_model(model, trust_remote_code=trust_remote_code, device=device)
        explanation = (
            explain_pair(encoder, texts[0], documents[0], doc_max_length, query_max_length)
            if pair
            else explain_text(
                encoder,
                texts[0],
                side or "document",
                side_max_length(side or "document", doc_max_length, query_max_length),
            )
        )
        payload = {"model": model, "top": top} | explanation.to_dict(top)
        if doc_id is not None:
            payload["document"] |= {"id": doc_id, "corpus": str(corpus)}
        write_json(staged_json, payload)
        if staged_html is not None:
            write_html(staged_html, explanation, top, model)
    emit(payload, as_json, None, terminal_table(explanation, top))
