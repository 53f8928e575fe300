"""Explain: what a SPLADE vector holds, and which terms make a query–document score.

A text's vector has one weight ``w_v >= 0`` per vocabulary term v; its *top terms* are its heaviest
entries (order: :func:`spladekit.common.sparse.best_first`, weight descending, then term id). A score is
the dot product ``s(q, d) = Σ_v q_v · d_v``; the *contribution* of term v is ``q_v · d_v``, non-zero
only for terms active in both vectors, so the contributions of the shared terms sum to the score.

Queries are encoded on the query side and documents on the document side (:func:`encode_side`), so the
view shows the vectors that retrieval compares. Terms are shown as the tokenizer spells them, made
readable by its own ``convert_tokens_to_string``: WordPiece continuations keep ``##`` (``##ing``),
SentencePiece ``▁`` and byte-level BPE ``Ġ`` word-start markers are dropped; the raw token is kept too.

Outputs: :meth:`TextExplanation.to_dict` / :meth:`PairExplanation.to_dict` (the ``--json`` keys),
:func:`terminal_table` (rich) and :func:`html_page` (one self-contained page: inline CSS bar charts, no
script, every text escaped). :func:`explain_run` writes the pair view for a few queries of a run
against their top-ranked document (the quickstart's ``explain/`` folder).
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scipy.sparse as sp

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import SpladekitError
from spladekit.common.sparse import best_first
from spladekit.model.encoder import check_side
from spladekit.model.folding import dimension_tokenizer

if TYPE_CHECKING:
    from spladekit.data.collections import Collection
    from spladekit.evaluation.run import Run
    from spladekit.model.loading import RetrievalModel

DEFAULT_TOP = 20


# ----------------------------------------------------------------------------------------- encoding
def encode_side(model: RetrievalModel, texts: Sequence[str], side: str, max_length: int | None = None) -> sp.csr_matrix:
    """Encode ``texts`` as queries (``encode_query``) or documents (``encode_document``), each side with its
    own token limit unless ``max_length`` is given."""
    encode = model.encode_query if check_side(side) == "query" else model.encode_document
    return encode(list(texts), max_length=max_length, show_progress=False)


def check_top(top: int) -> int:
    if top < 1:
        raise SpladekitError(f"top (--top) must be at least 1, got {top}")
    return top


def check_text(text: str, what: str = "text") -> str:
    if not text.strip():
        raise SpladekitError(f"{what} is empty: nothing to explain")
    return text


def readable_tokens(tokenizer: Any, ids: Sequence[int]) -> list[tuple[str, str]]:
    """``(raw token, readable form)`` of each vocabulary id (an id beyond the tokenizer: ``[id N]``)."""
    pairs = []
    for term_id, token in zip(ids, tokenizer.convert_ids_to_tokens([int(i) for i in ids])):
        if token is None:  # the head may have more rows than the tokenizer has tokens (padded vocabularies)
            pairs.append((f"[id {term_id}]", f"[id {term_id}]"))
            continue
        text = tokenizer.convert_tokens_to_string([token]).strip() or token
        pairs.append((token, text if text.isprintable() else ascii(text)[1:-1]))
    return pairs


# ----------------------------------------------------------------------------------------- explanations
@dataclass(frozen=True)
class Term:
    """One active vocabulary term of a vector."""

    id: int
    token: str  # as the tokenizer spells it
    term: str  # readable form
    weight: float

    def to_dict(self) -> dict:
        return {"term": self.term, "token": self.token, "id": self.id, "weight": self.weight}


@dataclass(frozen=True)
class TextExplanation:
    """Every active term of one text's vector, heaviest first."""

    text: str
    side: str
    terms: list[Term]

    @property
    def nnz(self) -> int:
        return len(self.terms)

    def to_dict(self, top: int | None = None) -> dict:
        return {
            "text": self.text,
            "side": self.side,
            "nnz": self.nnz,
            "l1": float(sum(term.weight for term in self.terms)),
            "terms": [term.to_dict() for term in self.terms[:top]],
        }


@dataclass(frozen=True)
class Contribution:
    """A term active in both vectors and its share of the score, ``q_v · d_v``."""

    id: int
    token: str
    term: str
    query_weight: float
    document_weight: float
    contribution: float

    def to_dict(self) -> dict:
        return {
            "term": self.term,
            "token": self.token,
            "id": self.id,
            "query_weight": self.query_weight,
            "document_weight": self.document_weight,
            "contribution": self.contribution,
        }


@dataclass(frozen=True)
class PairExplanation:
    """A query–document score and the shared terms that make it, largest contribution first."""

    query: TextExplanation
    document: TextExplanation
    contributions: list[Contribution]
    score: float  # the dot product of the two vectors (= the sum of the contributions)

    def to_dict(self, top: int | None = None) -> dict:
        shown = self.contributions[:top]
        return {
            "score": self.score,
            "shared_terms": len(self.contributions),
            "shown_score": float(sum(c.contribution for c in shown)),
            "contributions": [c.to_dict() for c in shown],
            "query": self.query.to_dict(top),
            "document": self.document.to_dict(top),
        }


def explain_vector(tokenizer: Any, row: sp.csr_matrix, text: str, side: str) -> TextExplanation:
    """The active terms of one encoded vector (a 1 × V CSR row), heaviest first."""
    row = sp.csr_matrix(row, copy=True)  # eliminate_zeros works in place: leave the caller's matrix alone
    row.eliminate_zeros()
    order = best_first(row.indices, row.data)
    ids, weights = row.indices[order], row.data[order]
    tokens = readable_tokens(tokenizer, ids.tolist())
    return TextExplanation(
        text, side, [Term(int(i), token, term, float(w)) for i, (token, term), w in zip(ids, tokens, weights)]
    )


def explain_text(
    model: RetrievalModel, text: str, side: str = "document", max_length: int | None = None
) -> TextExplanation:
    """Encode ``text`` on ``side`` and list its active terms, heaviest first."""
    vector = encode_side(model, [check_text(text)], side, max_length)
    return explain_vector(dimension_tokenizer(model), vector, text, side)


def explain_vectors(
    tokenizer: Any, query_vector: sp.csr_matrix, document_vector: sp.csr_matrix, query: str, document: str
) -> PairExplanation:
    """The pair view of two encoded vectors (1 × V rows)."""
    q, d = sp.csr_matrix(query_vector), sp.csr_matrix(document_vector)
    score = float((q @ d.T).toarray()[0, 0])
    products = q.multiply(d).tocsr()  # q_v · d_v on the shared terms
    products.eliminate_zeros()
    order = best_first(products.indices, products.data)
    ids = products.indices[order]
    q_dense, d_dense = q.toarray()[0], d.toarray()[0]
    contributions = [
        Contribution(int(i), token, term, float(q_dense[i]), float(d_dense[i]), float(value))
        for i, (token, term), value in zip(ids, readable_tokens(tokenizer, ids.tolist()), products.data[order])
    ]
    return PairExplanation(
        explain_vector(tokenizer, q, query, "query"),
        explain_vector(tokenizer, d, document, "document"),
        contributions,
        score,
    )


def explain_pair(
    model: RetrievalModel,
    query: str,
    document: str,
    max_length: int | None = None,
    query_max_length: int | None = None,
) -> PairExplanation:
    """Encode ``query`` (query side, at ``query_max_length``, else ``max_length``, else the model's query limit) and
    ``document`` (document side, at ``max_length``, else the model's limit); the terms behind their score."""
    check_text(query, "query")
    check_text(document, "document")
    return explain_vectors(
        dimension_tokenizer(model),
        encode_side(model, [query], "query", query_max_length or max_length),
        encode_side(model, [document], "document", max_length),
        query,
        document,
    )


# ----------------------------------------------------------------------------------------- terminal
def terminal_table(explanation: TextExplanation | PairExplanation, top: int = DEFAULT_TOP, width: int = 120) -> str:
    """A rich table: a text's top terms, or a pair's top contributions (with the score and coverage)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # cells as Text: a token like "[unused0]" is not rich markup

    if isinstance(explanation, PairExplanation):
        shown = explanation.contributions[:top]
        summary = explanation.to_dict(top)
        headline = (
            f"score {explanation.score:.4f} = Σ q_v·d_v over {len(explanation.contributions)} shared terms "
            f"(query nnz {explanation.query.nnz}, document nnz {explanation.document.nnz})"
        )
        table = Table()
        for column in ("#", "term", "q_v", "d_v", "q_v·d_v", "share"):
            table.add_column(column, justify="left" if column == "term" else "right")
        for rank, item in enumerate(shown, start=1):
            share = item.contribution / explanation.score if explanation.score else 0.0
            table.add_row(
                str(rank),
                Text(item.term),
                f"{item.query_weight:.3f}",
                f"{item.document_weight:.3f}",
                f"{item.contribution:.3f}",
                f"{share:.1%}",
            )
        footer = (
            f"top {len(shown)} of {len(explanation.contributions)} shared terms: "
            f"{summary['shown_score']:.4f} of the score"
        )
    else:
        headline = f"{explanation.side} vector: {explanation.nnz} active terms"
        table = Table()
        for column in ("#", "term", "id", "weight", ""):
            table.add_column(column, justify="left" if column in ("term", "") else "right")
        heaviest = explanation.terms[0].weight if explanation.terms else 1.0
        for rank, term in enumerate(explanation.terms[:top], start=1):
            table.add_row(
                str(rank),
                Text(term.term),
                str(term.id),
                f"{term.weight:.3f}",
                "█" * max(1, round(24 * term.weight / heaviest)),
            )
        footer = f"top {min(top, explanation.nnz)} of {explanation.nnz} terms"
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None)
    console.print(Text(headline))  # above the table, not its title: a title wraps to the table's width
    console.print(table)
    console.print(Text(footer))
    return buffer.getvalue().rstrip()


# ----------------------------------------------------------------------------------------- HTML
STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.meta { color: #555; } .score { font-size: 1.2em; font-weight: 600; }
blockquote { margin: .5em 0; padding: .5em 1em; background: #f5f5f7; border-left: 4px solid #999;
             white-space: pre-wrap; max-height: 14em; overflow: auto; }
.columns { display: flex; flex-wrap: wrap; gap: 2em; } .columns > section { flex: 1 1 28em; }
.chart { display: grid; grid-template-columns: minmax(6em, max-content) 1fr 4.5em; gap: 2px .6em;
         align-items: center; }
.term { font-family: ui-monospace, Menlo, Consolas, monospace; text-align: right; white-space: nowrap; }
.track { background: #eef0f4; height: 1.05em; }
.bar { height: 100%; background: #4a78c2; } .query .bar { background: #d08a2c; }
.contribution .bar { background: #3c9a5f; } .shared { font-weight: 700; }
.value { font-variant-numeric: tabular-nums; text-align: right; }
"""


def _chart(rows: Sequence[tuple[str, float, bool, str]], kind: str) -> str:
    """Horizontal bars, each ``(label, value, emphasised, tooltip)``, scaled to the largest value."""
    if not rows:
        return '<p class="meta">no active terms</p>'
    largest = max(value for _, value, _, _ in rows) or 1.0
    cells = []
    for label, value, emphasised, tooltip in rows:
        width = 100.0 * value / largest
        cells.append(
            f'<div class="term{" shared" if emphasised else ""}">{html.escape(label)}</div>'
            f'<div class="track" title="{html.escape(tooltip)}"><div class="bar" style="width:{width:.1f}%">'
            f'</div></div><div class="value">{value:.3f}</div>'
        )
    return f'<div class="chart {kind}">' + "".join(cells) + "</div>"


def _text_section(explanation: TextExplanation, top: int, title: str, shared: AbstractSet[int] = frozenset()) -> str:
    rows = [
        (term.term, term.weight, term.id in shared, f"{term.token} (id {term.id})") for term in explanation.terms[:top]
    ]
    return (
        f'<section class="{explanation.side}"><h2>{html.escape(title)}</h2>'
        f'<p class="meta">{explanation.nnz} active terms; top {len(rows)} shown'
        f"{'; bold: shared with the other side' if shared else ''}</p>"
        f"<blockquote>{html.escape(explanation.text)}</blockquote>{_chart(rows, explanation.side)}</section>"
    )


def html_page(
    explanation: TextExplanation | PairExplanation, top: int = DEFAULT_TOP, model: str = "", title: str = ""
) -> str:
    """One self-contained HTML page (inline CSS bar charts, no script, no external resource)."""
    heading = title or ("query–document score" if isinstance(explanation, PairExplanation) else "top terms")
    parts = [f"<h1>spladekit explain: {html.escape(heading)}</h1>"]
    if model:
        parts.append(f'<p class="meta">model: <code>{html.escape(model)}</code></p>')
    if isinstance(explanation, PairExplanation):
        summary = explanation.to_dict(top)
        shared = {item.id for item in explanation.contributions}
        rows = [
            (item.term, item.contribution, False, f"q_v {item.query_weight:.3f} × d_v {item.document_weight:.3f}")
            for item in explanation.contributions[:top]
        ]
        parts += [
            f'<p class="score">score {explanation.score:.4f} = Σ<sub>v</sub> q<sub>v</sub>·d<sub>v</sub> over '
            f"{len(explanation.contributions)} shared terms</p>",
            f'<section class="contribution"><h2>Contributions q<sub>v</sub>·d<sub>v</sub></h2>'
            f'<p class="meta">top {len(rows)} shown, {summary["shown_score"]:.4f} of the score</p>'
            f"{_chart(rows, 'contribution')}</section>",
            '<div class="columns">',
            _text_section(explanation.query, top, "Query terms", shared),
            _text_section(explanation.document, top, "Document terms", shared),
            "</div>",
        ]
    else:
        parts.append(_text_section(explanation, top, f"{explanation.side.capitalize()} terms"))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>spladekit explain: {html.escape(heading)}</title>\n<style>{STYLE}</style>\n</head>\n"
        "<body>\n" + "\n".join(parts) + "\n</body>\n</html>\n"
    )


def write_html(
    path: str | Path,
    explanation: TextExplanation | PairExplanation,
    top: int = DEFAULT_TOP,
    model: str = "",
    title: str = "",
) -> Path:
    """Write :func:`html_page` to ``path`` atomically."""
    with atomic_file(path) as stream:
        stream.write(html_page(explanation, top, model, title))
    return Path(path)


# ----------------------------------------------------------------------------------------- runs
def _file_name(query_id: str, taken: set[str]) -> str:
    """``query-<id>.html`` with characters that are unsafe in a file name replaced (unique in ``taken``)."""
    stem = "query-" + re.sub(r"[^A-Za-z0-9._-]", "_", query_id)
    name, number = f"{stem}.html", 1
    while name in taken:
        number += 1
        name = f"{stem}-{number}.html"
    taken.add(name)
    return name


def explain_run(
    model: RetrievalModel,
    collection: Collection,
    run: Run,
    folder: str | Path,
    queries: int = 3,
    top: int = DEFAULT_TOP,
    model_name: str = "",
) -> list[dict]:
    """For the first ``queries`` queries of ``run`` (collection order) that retrieved something, write the
    pair view against their top-ranked document: ``query-<id>.html`` each, plus ``summary.json`` (one
    record per query: ids, texts, score, whether the document is judged relevant, top contributions) and
    ``summary.md`` (a table linking the pages). Returns the records."""
    check_top(top)
    folder = Path(folder)
    documents = dict(zip(collection.corpus.ids, collection.corpus.texts))
    chosen = [
        (query_id, text)
        for query_id, text in zip(collection.queries.ids, collection.queries.texts)
        if run.ranking(query_id)
    ][:queries]
    records: list[dict] = []
    taken: set[str] = set()
    for query_id, text in chosen:
        doc_id = run.ranking(query_id)[0]
        explanation = explain_pair(model, text, documents[doc_id])
        name = _file_name(query_id, taken)
        write_html(
            folder / name, explanation, top, model_name, title=f"query {query_id} against its top document {doc_id}"
        )
        records.append(
            {
                "query_id": query_id,
                "doc_id": doc_id,
                "page": name,
                "relevance": collection.qrels.get(query_id, {}).get(doc_id, 0),
                "run_score": run.scores[query_id][doc_id],
            }
            | explanation.to_dict(top)
        )
    with atomic_file(folder / "summary.json") as stream:
        stream.write(json.dumps(records, indent=2) + "\n")
    lines = [
        "# Why the top document? Term contributions q_v·d_v",
        "",
        "| query | top document | judged relevance | score | top contributing terms | page |",
        "|---|---|---|---|---|---|",
    ]
    for record in records:
        terms = ", ".join(f"{c['term']} {c['contribution']:.2f}" for c in record["contributions"][:5])
        lines.append(
            f"| {record['query_id']}: {_cell(record['query']['text'])} | {record['doc_id']} | "
            f"{record['relevance']} | {record['score']:.3f} | {_cell(terms)} | [{record['page']}]({record['page']}) |"
        )
    with atomic_file(folder / "summary.md") as stream:
        stream.write("\n".join(lines) + "\n")
    return records


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
