"""explain: top terms, q_v·d_v contributions (sum = dot product), the HTML page, the CLI, the run view."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import numpy as np
import pytest

from collection_files import DOCS, write_beir
from spladekit.data.collections import load_collection
from spladekit.evaluation.evaluate import evaluate
from spladekit.evaluation.explain import (
    encode_side,
    explain_pair,
    explain_run,
    explain_text,
    explain_vectors,
    html_page,
    readable_tokens,
    terminal_table,
)
from spladekit.evaluation.run import Run
from spladekit.model.encoder import SparseEncoder
from tiny_models import build_tiny_model

QUERY = "what is the capital of france"
DOCUMENT = "paris is the capital city of france on the river seine"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model("bert", tmp_path_factory.mktemp("explain") / "bert")


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SparseEncoder.from_pretrained(model_dir)


def test_contributions_are_the_shared_terms_products_sorted_and_sum_to_the_dot_product(encoder):
    pair = explain_pair(encoder, QUERY, DOCUMENT)
    q = encoder.encode([QUERY], show_progress=False).toarray()[0].astype(np.float64)
    d = encoder.encode([DOCUMENT], show_progress=False).toarray()[0].astype(np.float64)
    shared = np.flatnonzero((q > 0) & (d > 0))
    assert len(shared) > 0
    assert sorted(c.id for c in pair.contributions) == shared.tolist()
    for item in pair.contributions:
        assert item.query_weight == pytest.approx(q[item.id], rel=1e-6)
        assert item.document_weight == pytest.approx(d[item.id], rel=1e-6)
        assert item.contribution == pytest.approx(q[item.id] * d[item.id], rel=1e-6)
    values = [item.contribution for item in pair.contributions]
    assert values == sorted(values, reverse=True)
    assert pair.score == pytest.approx(float(q @ d), rel=1e-5)
    assert sum(values) == pytest.approx(pair.score, rel=1e-5)
    shown = pair.to_dict(top=3)
    assert len(shown["contributions"]) == 3 and shown["shared_terms"] == len(shared)
    assert shown["shown_score"] == pytest.approx(sum(values[:3]), rel=1e-6)


def test_top_terms_are_the_heaviest_entries_of_the_vector(encoder):
    explanation = explain_text(encoder, DOCUMENT)
    row = encoder.encode([DOCUMENT], show_progress=False)
    assert explanation.nnz == row.nnz
    heaviest = np.argsort(-row.data, kind="stable")[:5]
    assert [term.id for term in explanation.terms[:5]] == row.indices[heaviest].tolist()
    assert [term.weight for term in explanation.terms[:5]] == pytest.approx(row.data[heaviest].tolist())
    tokens = encoder.tokenizer.convert_ids_to_tokens([term.id for term in explanation.terms])
    assert [term.token for term in explanation.terms] == tokens
    assert encoder.decode(row, top=5) == {term.token: pytest.approx(term.weight) for term in explanation.terms[:5]}


def test_word_pieces_keep_their_continuation_mark(encoder):
    ids = encoder.tokenizer.convert_tokens_to_ids(["##q", "paris", "[CLS]"])
    assert readable_tokens(encoder.tokenizer, ids) == [("##q", "##q"), ("paris", "paris"), ("[CLS]", "[CLS]")]


class TwoSided:
    """A model whose query side differs from its document side (weights doubled), as encode_query allows."""

    def __init__(self, encoder):
        self.tokenizer = encoder.tokenizer
        self.inner = encoder
        self.calls: list[str] = []

    def encode_document(self, texts, max_length=None, show_progress=False):
        self.calls.append("encode_document")
        return self.inner.encode(texts, max_length=max_length, show_progress=show_progress)

    def encode_query(self, texts, max_length=None, show_progress=False):
        self.calls.append("encode_query")
        return 2 * self.inner.encode(texts, max_length=max_length, show_progress=show_progress)


def test_the_query_is_encoded_by_encode_query_and_the_document_by_encode_document(encoder):
    model = TwoSided(encoder)
    pair = explain_pair(model, QUERY, DOCUMENT)  # type: ignore[arg-type]
    assert model.calls == ["encode_query", "encode_document"]
    assert pair.score == pytest.approx(2 * explain_pair(encoder, QUERY, DOCUMENT).score, rel=1e-5)
    assert encode_side(encoder, [QUERY], "query").nnz == encoder.encode([QUERY], show_progress=False).nnz


def test_empty_text_and_bad_side_are_refused(encoder):
    from spladekit.common.errors import SpladekitError

    with pytest.raises(SpladekitError, match="empty"):
        explain_text(encoder, "   ")
    with pytest.raises(SpladekitError, match="document is empty"):
        explain_pair(encoder, QUERY, "")
    with pytest.raises(SpladekitError, match="unknown side"):
        explain_text(encoder, QUERY, side="title")


class Checker(HTMLParser):
    """Every element closed in order (void elements excepted); records tags, attributes and text."""

    VOID = {"meta", "br", "hr", "img", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += attrs
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unexpected </{tag}>")

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Checker:
    checker = Checker()
    checker.feed(page)
    checker.close()
    assert checker.errors == [] and checker.stack == [], (checker.errors, checker.stack)
    return checker


def test_html_page_is_well_formed_self_contained_and_escapes_text(encoder):
    hostile = 'the capital <script>alert("x")</script> & france'
    page = html_page(explain_pair(encoder, hostile, DOCUMENT), top=4, model="tiny <model>")
    checker = parse(page)
    assert "script" not in checker.tags
    assert "&lt;script&gt;" in page and "tiny &lt;model&gt;" in page
    assert hostile in "".join(checker.text)  # shown as text, exactly
    assert not [value for name, value in checker.attributes if name in ("src", "href")]  # nothing external
    assert "http" not in page
    charts = page.count('class="bar"')
    assert charts == 4 + 4 + 4  # contributions, query terms, document terms
    single = parse(html_page(explain_text(encoder, DOCUMENT), top=3))
    assert single.tags.count("div") > 0 and html_page(explain_text(encoder, DOCUMENT), top=3).count('class="bar"') == 3


def test_terminal_table_lists_the_top_terms_and_the_score(encoder):
    pair = explain_pair(encoder, QUERY, DOCUMENT)
    table = terminal_table(pair, top=2)
    assert f"score {pair.score:.4f}" in table and pair.contributions[0].term in table
    assert f"top 2 of {len(pair.contributions)} shared terms" in table
    single = terminal_table(explain_text(encoder, DOCUMENT), top=3)
    assert "top 3 of" in single


def test_cli_json_keys_files_and_doc_id(cli, model_dir, tmp_path):
    one = cli("explain", model_dir, DOCUMENT, "--top", "3", "--json")
    assert one.returncode == 0, one.stderr
    payload = json.loads(one.stdout)
    assert {"model", "top", "text", "side", "nnz", "l1", "terms"} <= payload.keys()
    assert len(payload["terms"]) == 3 and {"term", "token", "id", "weight"} <= payload["terms"][0].keys()

    output, page = tmp_path / "pair.json", tmp_path / "pair.html"
    two = cli("explain", model_dir, QUERY, DOCUMENT, "--top", "5", "--json-out", output, "--html", page)
    assert two.returncode == 0, two.stderr
    assert "q_v·d_v" in two.stdout
    pair = json.loads(output.read_text())
    assert {"score", "shared_terms", "shown_score", "contributions", "query", "document"} <= pair.keys()
    assert {"term", "query_weight", "document_weight", "contribution"} <= pair["contributions"][0].keys()
    parse(page.read_text())

    corpus = write_beir(tmp_path / "beir") / "corpus.jsonl"
    title, text = DOCS["d1"]
    by_id = cli("explain", model_dir, QUERY, "--corpus", corpus, "--doc-id", "d1", "--json")
    direct = cli("explain", model_dir, QUERY, f"{title} {text}", "--json")
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["score"] == pytest.approx(json.loads(direct.stdout)["score"])
    assert json.loads(by_id.stdout)["document"]["id"] == "d1"

    again = cli("explain", model_dir, QUERY, DOCUMENT, "--html", page)
    assert again.returncode == 2 and "already exists" in again.stderr
    replaced = cli("explain", model_dir, QUERY, "--html", page, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert "Query terms" not in page.read_text()  # now the one-text view


def test_explain_run_writes_a_page_per_query_scored_as_the_run(encoder, tmp_path):
    collection = load_collection(write_beir(tmp_path / "beir"), "test")
    evaluate(encoder, collection, cache=False, show_progress=False, run_path=tmp_path / "run.trec")
    run = Run.read(tmp_path / "run.trec")
    records = explain_run(encoder, collection, run, tmp_path / "explain", queries=3, top=5)
    assert [record["query_id"] for record in records] == ["q1", "q2", "q3"]
    for record in records:
        assert record["doc_id"] == run.ranking(record["query_id"])[0]
        assert record["score"] == pytest.approx(record["run_score"], rel=1e-4)
        assert record["relevance"] == collection.qrels[record["query_id"]].get(record["doc_id"], 0)
        parse((tmp_path / "explain" / record["page"]).read_text())
    assert json.loads((tmp_path / "explain" / "summary.json").read_text()) == records
    summary = (tmp_path / "explain" / "summary.md").read_text()
    assert all(f"]({record['page']})" in summary for record in records)


def test_explain_vectors_of_disjoint_vectors_scores_zero(encoder):
    import scipy.sparse as sp

    q = sp.csr_matrix(([1.0], ([0], [5])), shape=(1, encoder.vocab_size), dtype=np.float32)
    d = sp.csr_matrix(([2.0], ([0], [6])), shape=(1, encoder.vocab_size), dtype=np.float32)
    pair = explain_vectors(encoder.tokenizer, q, d, "a", "b")
    assert pair.score == 0.0 and pair.contributions == []
    parse(html_page(pair))
    assert "0 shared terms" in terminal_table(pair)
