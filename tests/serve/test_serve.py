"""spladekit serve: TEI's /embed_sparse shapes and statuses, hostile inputs, the API key, vectors equal to encode,
search with explanations, dynamic batching (one forward pass for concurrent requests), 429 when the queue is full,
requests whose client left dropped before their pass, the command's refusals."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from fastapi.testclient import TestClient

from spladekit.index import build_index
from spladekit.model.inference_free import InferenceFreeEncoder
from spladekit.model.loading import load_model
from spladekit.serve.app import create_app
from spladekit.serve.batching import Batcher
from spladekit.serve.encoding import ServedModel
from spladekit.serve.search import SearchService
from spladekit.serve.settings import ServeSettings, bound_primitive_cache, check_exposure, is_loopback
from spladekit.serve.tei import TeiError
from tiny_models import SAMPLE_TEXTS, build_tiny_model

LONG_TEXT = " ".join(["paris is the capital city of france"] * 40)  # ~280 tokens: above the tiny limit of 128
CORPUS = {f"d{i}": text for i, text in enumerate(SAMPLE_TEXTS)} | {"evil": "<img src=x onerror=alert(1)> paris france"}


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return build_tiny_model("bert", tmp_path_factory.mktemp("serve-models") / "bert")


@pytest.fixture(scope="module")
def served(bert_dir) -> ServedModel:
    return ServedModel(load_model(str(bert_dir), device="cpu"), str(bert_dir))


@pytest.fixture(scope="module")
def index_and_corpus(served, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("serve-index")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in CORPUS.items()))
    vectors = served.model.encode(list(CORPUS.values()), show_progress=False)
    searcher = build_index(vectors, "exact")
    searcher.doc_ids = list(CORPUS)
    searcher.save(folder / "index")
    return folder / "index", corpus


@pytest.fixture(scope="module")
def search(served, index_and_corpus) -> SearchService:
    index, corpus = index_and_corpus
    return SearchService.open(str(index), served.source, served.vocab_size, str(corpus))


class Counting:
    """The served model's encode, recording each forward pass's texts; ``gate`` (when set) holds the first pass
    until the test releases it."""

    def __init__(self, served: ServedModel, gate: threading.Event | None = None):
        self.inner, self.gate = served.encode, gate
        self.calls: list[list[str]] = []
        self.entered = threading.Event()

    def __call__(self, texts, side, direction="right"):
        self.calls.append(list(texts))
        self.entered.set()
        if self.gate is not None and len(self.calls) == 1:
            assert self.gate.wait(30), "the gate was never opened"
        return self.inner(texts, side, direction)


def counted(served: ServedModel, gate: threading.Event | None = None) -> tuple[ServedModel, Counting]:
    model = copy.copy(served)
    counter = Counting(served, gate)
    model.encode = counter  # type: ignore[method-assign]
    return model, counter


def client(served, search=None, collection: dict | None = None, **settings) -> TestClient:
    app = create_app(served, search, ServeSettings(**settings), collection=collection)
    return TestClient(app, raise_server_exceptions=False)


def dense(rows: list[list[dict]], width: int) -> np.ndarray:
    matrix = np.zeros((len(rows), width), dtype=np.float32)
    for r, row in enumerate(rows):
        for entry in row:
            matrix[r, entry["index"]] = entry["value"]
    return matrix


def assert_tei_error(response, status: int, error_type: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type and body["error"]
    return body


# ---------------------------------------------------------------------------------------------- TEI shapes
def test_embed_sparse_is_tei_shaped_and_equals_encode(served):
    with client(served) as api:
        response = api.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS})
        single = api.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS[0]})
        default_route = api.post("/", json={"inputs": SAMPLE_TEXTS[0]})
    assert response.status_code == 200, response.text
    rows = response.json()
    assert len(rows) == len(SAMPLE_TEXTS)
    for row in rows:
        assert all(set(entry) == {"index", "value"} for entry in row)
        assert [entry["index"] for entry in row] == sorted(entry["index"] for entry in row)
        assert all(entry["value"] > 0 for entry in row)  # zeros dropped
    expected = served.model.encode(SAMPLE_TEXTS, show_progress=False)
    np.testing.assert_array_equal(dense(rows, served.vocab_size), expected.toarray())
    assert len(single.json()) == 1
    alone = served.model.encode(SAMPLE_TEXTS[:1], show_progress=False)  # a batch of one: no padding
    np.testing.assert_array_equal(dense(single.json(), served.vocab_size), alone.toarray())
    assert default_route.json() == single.json()
    assert {"x-compute-tokens", "x-queue-time", "x-inference-time", "x-tokenization-time"} <= set(response.headers)


def test_query_side_and_the_extensions(served):
    text = SAMPLE_TEXTS[1]
    full = served.model.encode([text], show_progress=False)
    with client(served) as api:
        query = api.post("/embed_sparse", json={"inputs": text, "side": "query"}).json()
        top = api.post("/embed_sparse", json={"inputs": text, "top_k": 3, "return_tokens": True}).json()[0]
        cut = api.post("/embed_sparse", json={"inputs": text, "threshold": 0.5}).json()[0]
        qdrant = api.post("/embed_sparse", json={"inputs": [text], "format": "qdrant"}).json()[0]
        opensearch = api.post("/embed_sparse", json={"inputs": text, "format": "opensearch"}).json()[0]
        bad_side = api.post("/embed_sparse", json={"inputs": text, "side": "both"})
    np.testing.assert_array_equal(
        dense(query, served.vocab_size), served.model.encode_query([text], show_progress=False).toarray()
    )
    heaviest = np.argsort(-full.toarray()[0], kind="stable")[:3]
    assert sorted(entry["index"] for entry in top) == sorted(heaviest.tolist())
    assert all(entry["token"] == served.vocabulary[entry["index"]] for entry in top)
    assert cut and all(entry["value"] >= 0.5 for entry in cut)
    assert len(cut) == int((full.data >= 0.5).sum())
    assert qdrant["indices"] == full.indices.tolist() and np.allclose(qdrant["values"], full.data)
    assert opensearch == {served.vocabulary[i]: pytest.approx(v) for i, v in zip(full.indices, full.data)}
    assert_tei_error(bad_side, 422, "Validation")


def test_an_inference_free_model_serves_its_table_for_queries(served):
    weights = torch.rand(served.vocab_size, generator=torch.Generator().manual_seed(0)) + 0.1
    free = ServedModel(InferenceFreeEncoder(served.model, weights, query_max_length=8), "free")
    with client(free) as api:
        query = api.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS, "side": "query"}).json()
        documents = api.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS}).json()
    assert free.kind == "inference-free"
    np.testing.assert_array_equal(
        dense(query, free.vocab_size), free.model.encode_query(SAMPLE_TEXTS, show_progress=False).toarray()
    )
    np.testing.assert_array_equal(
        dense(documents, free.vocab_size), served.model.encode(SAMPLE_TEXTS, show_progress=False).toarray()
    )


def test_tokenize_info_health_metrics(served):
    with client(served) as api:
        tokens = api.post("/tokenize", json={"inputs": "é paris"}).json()
        batch = api.post("/tokenize", json={"inputs": ["paris", "a cat"], "add_special_tokens": False}).json()
        info = api.get("/info").json()
        health = api.get("/health")
        api.post("/embed_sparse", json={"inputs": ["paris", "france"]})
        api.post("/embed_sparse", json={"inputs": []})
        metrics = api.get("/metrics").text
    assert tokens[0][0] == {"id": 2, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert tokens[0][1]["start"] == 0 and tokens[0][1]["stop"] == 2  # "é" is two UTF-8 bytes, as TEI counts
    assert tokens[0][2] == {"id": tokens[0][2]["id"], "text": "paris", "special": False, "start": 3, "stop": 8}
    assert [len(row) for row in batch] == [1, 2] and not any(t["special"] for row in batch for t in row)
    for key in ("model_id", "model_dtype", "model_type", "max_concurrent_requests", "max_input_length"):
        assert key in info
    assert info["model_type"] == {"embedding": {"pooling": "splade"}} and info["max_input_length"] == 128
    assert info["max_client_batch_size"] == 32 and info["auto_truncate"] is True
    assert health.status_code == 200
    assert 'te_request_count_total{method="batch"} 2.0' in metrics
    assert 'te_request_failure_total{err="validation"} 1.0' in metrics
    assert 'te_request_failure_total{err="batch_size"}' not in metrics
    assert "te_batch_next_size_bucket" in metrics and "te_queue_size" in metrics


# ---------------------------------------------------------------------------------------------- statuses
def test_tei_statuses_for_bad_batches(served):
    with client(served, max_client_batch_size=4) as api:
        empty_batch = api.post("/embed_sparse", json={"inputs": []})
        empty_text = api.post("/embed_sparse", json={"inputs": ["paris", ""]})
        too_many = api.post("/embed_sparse", json={"inputs": ["paris"] * 5})
        too_long = api.post("/embed_sparse", json={"inputs": LONG_TEXT, "truncate": False})
        truncated = api.post("/embed_sparse", json={"inputs": LONG_TEXT, "truncate": True})
        default = api.post("/embed_sparse", json={"inputs": LONG_TEXT})  # auto_truncate: on
        chars = api.post("/embed_sparse", json={"inputs": "a" * (128 * 250 + 1), "truncate": False})
        prompt = api.post("/embed_sparse", json={"inputs": "paris", "prompt_name": "query"})
        metrics = api.get("/metrics").text
    assert "cannot be empty" in assert_tei_error(empty_batch, 400, "Empty")["error"]
    assert_tei_error(empty_text, 400, "Empty")
    assert assert_tei_error(too_many, 422, "Validation")["error"] == "batch size 5 > maximum allowed batch size 4"
    assert 'te_request_failure_total{err="batch_size"} 1.0' in metrics
    assert "must have less than 128 tokens" in assert_tei_error(too_long, 422, "Validation")["error"]
    assert truncated.status_code == 200 and default.json() == truncated.json()
    expected = served.model.encode([LONG_TEXT], show_progress=False)
    np.testing.assert_array_equal(dense(truncated.json(), served.vocab_size), expected.toarray())
    assert "characters" in assert_tei_error(chars, 422, "Validation")["error"]
    assert_tei_error(prompt, 422, "Validation")


def test_left_truncation_keeps_the_end(served):
    with client(served) as api:
        left = api.post("/embed_sparse", json={"inputs": LONG_TEXT + " vaccine", "truncation_direction": "Left"})
        right = api.post("/embed_sparse", json={"inputs": LONG_TEXT + " vaccine", "truncation_direction": "right"})
    vaccine = served.vocabulary.index("vaccine")
    left_rows, right_rows = dense(left.json(), served.vocab_size), dense(right.json(), served.vocab_size)
    assert not np.array_equal(left_rows, right_rows)
    served.tokenizer.truncation_side = "left"
    try:
        expected = served.model.encode([LONG_TEXT + " vaccine"], show_progress=False).toarray()
    finally:
        served.tokenizer.truncation_side = "right"
    np.testing.assert_array_equal(left_rows, expected)
    assert left_rows[0, vaccine] == expected[0, vaccine]


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (b'{"inputs": ', {"content-type": "application/json"}, 400),  # malformed JSON
        (b'{"inputs": "caf\xe9"}', {"content-type": "application/json"}, 400),  # not UTF-8
        (b'{"inputs": 5}', {"content-type": "application/json"}, 422),
        (b'{"inputs": [true]}', {"content-type": "application/json"}, 422),
        (b'{"inputs": "x", "truncate": "yes"}', {"content-type": "application/json"}, 422),
        (b'["paris"]', {"content-type": "application/json"}, 422),
        (b'{"inputs": "paris"}', {"content-type": "text/plain"}, 415),
        (b"", {"content-type": "application/json"}, 400),
        (b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", {"content-type": "application/json"}, 400),
        (b'{"inputs": "paris", "threshold": NaN}', {"content-type": "application/json"}, 422),
    ],
)
def test_hostile_bodies_get_the_error_shape(served, content, headers, status):
    with client(served) as api:
        response = api.post("/embed_sparse", content=content, headers=headers)
    assert_tei_error(response, status, "Validation")


def test_token_id_inputs_are_decoded_and_bad_ids_refused(served):
    ids = served.request_tokenizer("paris france", add_special_tokens=False)["input_ids"]
    with client(served) as api:
        from_ids = api.post("/embed_sparse", json={"inputs": ids})
        from_text = api.post("/embed_sparse", json={"inputs": "paris france"})
        bad = api.post("/embed_sparse", json={"inputs": [10**6]})
    assert from_ids.json() == from_text.json()
    assert_tei_error(bad, 422, "Tokenizer")


def test_a_body_above_the_limit_is_refused_before_it_is_read(served):
    big = json.dumps({"inputs": "paris " * 5000}).encode()
    with client(served, payload_limit=10_000) as api:
        declared = api.post("/embed_sparse", content=big, headers={"content-type": "application/json"})

        def chunks():
            for start in range(0, len(big), 4096):
                yield big[start : start + 4096]

        streamed = api.post("/embed_sparse", content=chunks(), headers={"content-type": "application/json"})
        fine = api.post("/embed_sparse", json={"inputs": "paris"})
    assert_tei_error(declared, 413, "Validation")
    assert_tei_error(streamed, 413, "Validation")
    assert fine.status_code == 200


def test_the_api_key_guards_every_route_but_health_and_the_shell(served):
    with client(served, api_key="s3cret") as api:
        missing = api.post("/embed_sparse", json={"inputs": "paris"})
        wrong = api.post("/embed_sparse", json={"inputs": "paris"}, headers={"Authorization": "Bearer s3cre"})
        longer = api.get("/info", headers={"Authorization": "Bearer s3cret!"})
        metrics = api.get("/metrics")
        right = api.post("/embed_sparse", json={"inputs": "paris"}, headers={"Authorization": "Bearer s3cret"})
        health = api.get("/health")
        page = api.get("/")
    for refused in (missing, wrong, longer, metrics):
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert right.status_code == 200 and health.status_code == 200
    assert page.status_code == 200 and "spladekit" in page.text and "s3cret" not in page.text


def test_cors_is_off_unless_an_origin_is_given(served):
    preflight = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
    with client(served) as api:
        closed = api.options("/embed_sparse", headers=preflight)
        plain = api.get("/info", headers={"Origin": "https://example.org"})
    with client(served, cors_origins=("https://example.org",), api_key="k") as api:
        opened = api.options("/embed_sparse", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers and "access-control-allow-origin" not in plain.headers
    assert opened.status_code == 200 and opened.headers["access-control-allow-origin"] == "https://example.org"


def test_the_page_puts_text_in_with_text_content_only():
    from spladekit.serve.page import PAGE

    assert "innerHTML" not in PAGE and "outerHTML" not in PAGE and "insertAdjacentHTML" not in PAGE
    assert "document.write" not in PAGE and "eval(" not in PAGE and "textContent" in PAGE


# ---------------------------------------------------------------------------------------------- search
def test_search_equals_the_searcher_and_explains_the_score(served, search):
    query = "capital of france"
    with client(served, search) as api:
        response = api.post("/search", json={"query": query, "k": 3, "explain": True})
        plain = api.post("/search", json={"query": query, "k": 3})
        info = api.get("/info").json()
    assert response.status_code == 200, response.text
    result = response.json()
    expected = search.search(served.model.encode_query([query], show_progress=False), 3)
    assert [(hit["id"], pytest.approx(hit["score"])) for hit in result["hits"]] == expected
    assert [hit["rank"] for hit in result["hits"]] == [1, 2, 3]
    assert result["query_terms"] and result["query_terms"][0]["weight"] >= result["query_terms"][-1]["weight"]
    for hit in result["hits"]:
        assert hit["text"] == CORPUS[hit["id"]]
        explanation = hit["explanation"]
        assert explanation["score"] == pytest.approx(hit["score"], rel=1e-5)  # the indexed vector, re-encoded
        if explanation["shared_terms"] <= 20:
            assert sum(c["contribution"] for c in explanation["contributions"]) == pytest.approx(hit["score"], 1e-4)
    assert [hit["id"] for hit in plain.json()["hits"]] == [hit["id"] for hit in result["hits"]]
    assert all(hit["explanation"] is None for hit in plain.json()["hits"]) and "query_terms" not in plain.json()
    assert info["spladekit"]["index"] == {"backend": "exact", "documents": len(CORPUS), "vocab_size": 160,
                                          "collection": True}  # fmt: skip


def test_create_app_takes_a_loaded_model_and_searcher(served, search):
    with client(served.model, search.searcher, collection=dict(CORPUS)) as api:
        hits = api.post("/search", json={"query": "river seine", "k": 2}).json()["hits"]
        rows = api.post("/embed_sparse", json={"inputs": "paris"}).json()
    assert [hit["id"] for hit in hits] == [doc_id for doc_id, _ in search.search(
        served.model.encode_query(["river seine"], show_progress=False), 2)]  # fmt: skip
    assert all(hit["text"] == CORPUS[hit["id"]] for hit in hits)
    np.testing.assert_array_equal(dense(rows, served.vocab_size), served.model.encode(["paris"]).toarray())


def test_search_refusals(served, search):
    with client(served, search, max_search_hits=5) as api:
        too_many = api.post("/search", json={"query": "paris", "k": 6})
        empty = api.post("/search", json={"query": "  "})
        unknown_field = api.post("/search", json={"query": "paris", "path": "/etc/passwd"})
    with client(served) as api:
        no_index = api.post("/search", json={"query": "paris"})
    assert_tei_error(too_many, 422, "Validation")
    assert_tei_error(empty, 400, "Empty")
    assert_tei_error(unknown_field, 422, "Validation")
    assert "--index" in assert_tei_error(no_index, 404, "Validation")["error"]


def test_an_index_of_another_vocabulary_is_refused_in_one_line(served, tmp_path):
    other = build_index(sp.random(4, served.vocab_size + 1, density=0.2, format="csr", dtype=np.float32), "exact")
    other.doc_ids = ["a", "b", "c", "d"]
    other.save(tmp_path / "other")
    with pytest.raises(Exception, match="vocabulary mismatch") as refused:
        SearchService.open(str(tmp_path / "other"), "tiny", served.vocab_size)
    assert "\n" not in str(refused.value)
    with pytest.raises(Exception, match="vocabulary mismatch"):
        create_app(served, SearchService(other, str(tmp_path / "other")))


# ---------------------------------------------------------------------------------------------- batching
def wait_until(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_concurrent_requests_are_encoded_in_one_forward_pass(served):
    gate = threading.Event()
    model, counter = counted(served, gate)
    texts = [f"{word} paris" for word in ("capital", "river", "city", "seine", "france", "vaccine")]
    with client(model) as api:
        server = api.app.state.server
        results: dict[str, object] = {}

        def post(text: str) -> None:
            results[text] = api.post("/embed_sparse", json={"inputs": text})

        first = threading.Thread(target=post, args=("the first",))
        first.start()
        assert counter.entered.wait(20)  # the first pass is running (held by the gate)
        threads = [threading.Thread(target=post, args=(text,)) for text in texts]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(server.batcher.queue) == len(texts))
        gate.set()
        for thread in [first, *threads]:
            thread.join(30)
    assert counter.calls[0] == ["the first"]
    assert len(counter.calls) == 2 and sorted(counter.calls[1]) == sorted(texts)  # one pass for all six
    for text in texts:
        expected = served.model.encode([text], show_progress=False).toarray()
        np.testing.assert_allclose(dense(results[text].json(), served.vocab_size), expected, rtol=1e-5, atol=1e-6)


def test_a_pass_holds_at_most_the_token_budget(served):
    gate = threading.Event()
    model, counter = counted(served, gate)
    texts = ["capital of france", "river seine paris", "vitamin bone pain"]
    assert served.count(texts, "document") == [5, 5, 5]  # with [CLS] and [SEP]
    with client(model, max_batch_tokens=10) as api:
        server = api.app.state.server
        threads = [
            threading.Thread(target=api.post, args=("/embed_sparse",), kwargs={"json": {"inputs": text}})
            for text in ["the first", *texts]
        ]
        threads[0].start()
        assert counter.entered.wait(20)
        for queued, thread in enumerate(threads[1:], start=1):  # one at a time: a known arrival order
            thread.start()
            wait_until(lambda queued=queued: len(server.batcher.queue) == queued)
        gate.set()
        for thread in threads:
            thread.join(30)
    assert counter.calls == [["the first"], texts[:2], texts[2:]]  # 5 + 5 fill the 10-token pass


def test_a_full_queue_answers_429_with_retry_after(served):
    gate = threading.Event()
    model, counter = counted(served, gate)
    with client(model, max_concurrent_requests=2, max_client_batch_size=1) as api:
        server = api.app.state.server
        threads = [
            threading.Thread(target=api.post, args=("/embed_sparse",), kwargs={"json": {"inputs": text}})
            for text in ["the first", "the second"]
        ]
        threads[0].start()
        assert counter.entered.wait(20)
        threads[1].start()
        wait_until(lambda: len(server.batcher.queue) == 1)
        refused = api.post("/embed_sparse", json={"inputs": "the third"})
        gate.set()
        for thread in threads:
            thread.join(30)
        after = api.post("/embed_sparse", json={"inputs": "the fourth"})
        metrics = api.get("/metrics").text
    body = assert_tei_error(refused, 429, "Overloaded")
    assert body["error"] == "Model is overloaded" and refused.headers["retry-after"] == "1"
    assert after.status_code == 200 and server.batcher.admitted == 0
    assert 'te_request_failure_total{err="overloaded"} 1.0' in metrics


def test_a_request_whose_client_left_is_dropped_before_its_pass(served):
    """Raw ASGI: the second request's client disconnects while the first pass runs; its text never reaches the
    model."""
    gate = threading.Event()
    model, counter = counted(served, gate)
    app = create_app(model)

    async def scenario() -> list[int]:
        statuses: list[int] = []

        async def request(text: str, leave: asyncio.Event | None) -> None:
            body = json.dumps({"inputs": text}).encode()
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": "/embed_sparse",
                "raw_path": b"/embed_sparse",
                "query_string": b"",
                "root_path": "",
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                "client": ("127.0.0.1", 1),
                "server": ("127.0.0.1", 80),
            }
            sent = False

            async def receive():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                if leave is not None:
                    await leave.wait()
                    return {"type": "http.disconnect"}
                await asyncio.Event().wait()  # never: this client stays

            async def send(message):
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            await app(scope, receive, send)

        async with app.router.lifespan_context(app):
            batcher = app.state.server.batcher
            first = asyncio.ensure_future(request("the first", None))
            while not counter.entered.is_set():
                await asyncio.sleep(0.005)
            leave = asyncio.Event()
            second = asyncio.ensure_future(request("the one who leaves", leave))
            while len(batcher.queue) < 1:
                await asyncio.sleep(0.005)
            leave.set()
            await second
            gate.set()
            await first
            third = await asyncio.wait_for(request("the third", None), 30)
            assert third is None
            assert batcher.dropped == 1
        return statuses

    statuses = asyncio.run(scenario())
    assert [texts for texts in counter.calls] == [["the first"], ["the third"]]
    assert statuses.count(200) == 2


def test_the_batcher_gathers_jobs_submitted_together(served):
    """The batcher alone: jobs queued while a pass runs go together into the next, in order, by kind."""
    calls: list[tuple[list[str], str]] = []

    def encode(texts, side, direction):
        calls.append((list(texts), side))
        time.sleep(0.05)
        return sp.csr_matrix(np.arange(len(texts), dtype=np.float32).reshape(-1, 1) + 1)

    async def scenario():
        batcher = Batcher(encode, ServeSettings())
        await batcher.start()
        first = asyncio.ensure_future(batcher.submit(["a"], 1, "document"))
        await asyncio.sleep(0.01)
        rest = [
            asyncio.ensure_future(batcher.submit([text], 1, side))
            for text, side in [("b", "document"), ("q", "query"), ("c", "document")]
        ]
        jobs = await asyncio.gather(first, *rest)
        await batcher.stop()
        return jobs

    jobs = asyncio.run(scenario())
    assert calls == [(["a"], "document"), (["b", "c"], "document"), (["q"], "query")]
    assert [job.future.result().toarray()[0, 0] for job in jobs] == [1, 1, 1, 2]


def test_a_pass_waits_for_the_clients_of_the_previous_one_and_one_client_never_waits():
    """Clients answered together come back together: the next pass waits (up to the previous pass's time) until
    as many requests are queued as the previous pass answered, instead of starting with the first one back."""
    calls: list[list[str]] = []

    def encode(texts, side, direction):
        calls.append(list(texts))
        time.sleep(0.2)
        return sp.csr_matrix(np.ones((len(texts), 1), dtype=np.float32))

    async def scenario():
        batcher = Batcher(encode, ServeSettings(batch_wait_ms=1000))
        await batcher.start()
        await asyncio.gather(*(batcher.submit([text], 1, "document") for text in "abc"))
        back = []
        for text in "def":  # the three clients come back one by one, 10 ms apart
            back.append(asyncio.ensure_future(batcher.submit([text], 1, "document")))
            await asyncio.sleep(0.01)
        await asyncio.gather(*back)
        alone = await batcher.submit(["g"], 1, "document")  # one client: its pass answered one request
        single = await batcher.submit(["h"], 1, "document")
        await batcher.stop()
        return alone, single

    alone, single = asyncio.run(scenario())
    assert calls == [["a", "b", "c"], ["d", "e", "f"], ["g"], ["h"]]
    assert single.queue_s < 0.05  # not the 200 ms window: nobody else was expected


def test_a_failing_model_answers_424_and_the_server_goes_on(served):
    model = copy.copy(served)
    failures = iter([RuntimeError("device lost")])

    def encode(texts, side, direction="right"):
        error = next(failures, None)
        if error is not None:
            raise error
        return served.encode(texts, side, direction)

    model.encode = encode  # type: ignore[method-assign]
    with client(model) as api:
        failed = api.post("/embed_sparse", json={"inputs": "paris"})
        fine = api.post("/embed_sparse", json={"inputs": "paris"})
    assert "device lost" in assert_tei_error(failed, 424, "Backend")["error"]
    assert fine.status_code == 200


# ---------------------------------------------------------------------------------------------- safe defaults
def test_exposure_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")
    check_exposure("127.0.0.1", None, False)
    check_exposure("0.0.0.0", "key", False)
    check_exposure("0.0.0.0", None, True)
    with pytest.raises(Exception, match="--allow-unauthenticated"):
        check_exposure("0.0.0.0", None, False)
    with pytest.raises(Exception, match="max_client_batch_size"):
        ServeSettings(max_client_batch_size=10, max_concurrent_requests=5)
    assert TeiError("x", "Overloaded").status == 429 and TeiError("x", "Empty").status == 400


def test_the_command_refuses_before_loading_anything(bert_dir, tmp_path, cli, refuse_model_loading, monkeypatch):
    monkeypatch.delenv("SPLADEKIT_API_KEY", raising=False)
    exposed = cli("serve", bert_dir, "--host", "0.0.0.0")
    assert exposed.returncode == 2 and exposed.stderr.count("\n") == 1 and "--api-key" in exposed.stderr
    lonely = cli("serve", bert_dir, "--collection", tmp_path / "corpus.jsonl")
    assert lonely.returncode == 2 and "needs --index" in lonely.stderr
    missing = cli("serve", bert_dir, "--index", tmp_path / "nothing")
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and missing.stderr.count("\n") == 1


def test_the_command_refuses_an_index_of_another_vocabulary(bert_dir, tmp_path, cli, monkeypatch):
    other = build_index(sp.random(3, 50, density=0.3, format="csr", dtype=np.float32), "exact")
    other.doc_ids = ["a", "b", "c"]
    other.save(tmp_path / "other")

    def never(*args, **kwargs):
        raise AssertionError("the server started")

    monkeypatch.setattr("uvicorn.run", never)
    refused = cli("serve", bert_dir, "--index", tmp_path / "other")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "vocabulary mismatch" in refused.stderr and "50" in refused.stderr and "160" in refused.stderr


@pytest.mark.slow
def test_an_exported_onnx_folder_is_served_through_onnxruntime(served, tmp_path):
    pytest.importorskip("onnxruntime")
    from spladekit.model.onnx import OnnxEncoder, export_onnx
    from spladekit.serve.encoding import load_served_model

    (tmp_path / "onnx").mkdir()
    export_onnx(served.model, tmp_path / "onnx")
    onnx = load_served_model(str(tmp_path / "onnx"))
    assert onnx.kind == "onnx"
    with client(onnx) as api:
        rows = api.post("/embed_sparse", json={"inputs": SAMPLE_TEXTS}).json()
        info = api.get("/info").json()
    expected = OnnxEncoder(tmp_path / "onnx").encode(SAMPLE_TEXTS, show_progress=False)
    np.testing.assert_array_equal(dense(rows, served.vocab_size), expected.toarray())
    np.testing.assert_allclose(dense(rows, served.vocab_size), served.model.encode(SAMPLE_TEXTS).toarray(), atol=1e-4)
    assert info["spladekit"]["model"]["kind"] == "onnx" and info["max_input_length"] == 128


# ---------------------------------------------------------------------------------------------- a real server
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_sigterm_lets_the_request_in_flight_finish(bert_dir, tmp_path):
    """``spladekit serve`` in its own process: SIGTERM while a request's body is half sent; the server waits for it,
    answers it (200, its vectors), then exits 0; new connections are refused meanwhile."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    port = free_port()
    env = {name: value for name, value in os.environ.items() if name != "SPLADEKIT_API_KEY"}
    process = subprocess.Popen(
        [sys.executable, "-m", "spladekit", "serve", str(bert_dir), "--port", str(port), "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        body = json.dumps({"inputs": SAMPLE_TEXTS}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
            head = (
                f"POST /embed_sparse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            connection.sendall(head + body[:10])
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert process.poll() is None  # draining: the request in flight holds it
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            connection.sendall(body[10:])
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 200"), answer[:300]
        rows = json.loads(rest.partition(b"\r\n\r\n")[2])
        assert len(rows) == len(SAMPLE_TEXTS)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        output = process.communicate()[0]
    assert "Shutting down" in output or "Finished server process" in output, output


def test_the_primitive_caches_are_capped_unless_the_user_chose(monkeypatch):
    """oneDNN and ideep keep a primitive per matmul shape; a server's shapes vary with traffic, so serve caps both
    caches (its memory grew for minutes under overload without the caps) — and a value the user set wins."""
    import os

    from spladekit.serve.settings import PRIMITIVE_CACHE_VARIABLES, SERVED_PRIMITIVE_CACHE

    chosen, left = PRIMITIVE_CACHE_VARIABLES
    monkeypatch.setenv(chosen, "1024")
    monkeypatch.delenv(left, raising=False)
    bound_primitive_cache()
    assert os.environ[chosen] == "1024" and os.environ[left] == str(SERVED_PRIMITIVE_CACHE)
    monkeypatch.delenv(chosen)
    bound_primitive_cache()
    assert os.environ[chosen] == str(SERVED_PRIMITIVE_CACHE)
