"""evaluate: metrics equal ir_measures on the same run/qrels, FLOPS by hand, cache, bad input, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ir_measures
import numpy as np
import pytest
import scipy.sparse as sp

from collection_files import QRELS, write_beir
from spladekit import SparseEncoder
from spladekit.common.atomic import OUTPUT_MARK, mark_output
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.sparse import keep_top_weights
from spladekit.data import load_collection, reconcile
from spladekit.evaluation.evaluate import compute_metrics, evaluate, evaluate_suite, retrieval_flops
from spladekit.evaluation.result import EvaluationResult
from spladekit.evaluation.run import Run
from spladekit.index import ExactSearcher
from spladekit.vectors.artifact import Vectors
from tiny_models import build_tiny_model

MEASURES = ("nDCG@10", "RR@10", "R@1000")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model("bert", tmp_path_factory.mktemp("models") / "bert")


@pytest.fixture(scope="module")
def encoder(model_dir):
    return SparseEncoder.from_pretrained(model_dir)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))


def test_flops_hand_computed():
    # queries: q0 = {0, 1}, q1 = {1}; documents: d0 = {1, 2}, d1 = {0, 1}, d2 = {2}
    queries = sp.csr_matrix(np.array([[0.5, 2.0, 0], [0, 1.0, 0]], dtype=np.float32))
    documents = sp.csr_matrix(np.array([[0, 1.0, 3.0], [0.1, 0.2, 0], [0, 0, 7.0]], dtype=np.float32))
    # p_q = (1/2, 2/2, 0), p_d = (1/3, 2/3, 2/3): 1/2·1/3 + 1·2/3 + 0·2/3 = 5/6
    assert retrieval_flops(queries, documents) == pytest.approx(5 / 6)


def test_compute_metrics_equals_ir_measures(tmp_path):
    qrels_path, run_path = tmp_path / "qrels.txt", tmp_path / "run.txt"
    qrels_path.write_text("q1 0 d1 1\nq1 0 d2 2\nq2 0 d3 1\nq2 0 d1 0\nq3 0 d9 1\n")
    run_path.write_text(
        "q1 Q0 d2 1 3.0 t\nq1 Q0 d5 2 2.0 t\nq1 Q0 d1 3 1.0 t\n"
        "q2 Q0 d1 1 5.0 t\nq2 Q0 d3 2 4.0 t\nq3 Q0 d4 1 1.0 t\nq3 Q0 d9 2 0.5 t\n"
    )
    qrels = {q: {d: r for d, r in docs.items()} for q, docs in _group(ir_measures.read_trec_qrels(str(qrels_path)))}
    run = Run.read(run_path)
    expected = ir_measures.calc_aggregate(
        [ir_measures.parse_measure(m) for m in MEASURES],
        ir_measures.read_trec_qrels(str(qrels_path)),
        ir_measures.read_trec_run(str(run_path)),
    )
    means, per_query = compute_metrics(qrels, run, MEASURES)
    assert means == pytest.approx({str(m): v for m, v in expected.items()})
    assert per_query["RR@10"] == pytest.approx({"q1": 1.0, "q2": 0.5, "q3": 0.5})
    # a judged query with no hit at all counts as 0, in the mean and per query (ir_measures >= 0.4 does this)
    del run.scores["q3"]
    means, per_query = compute_metrics(qrels, run, ["RR@10"])
    assert means["RR@10"] == pytest.approx((1 + 0.5 + 0) / 3) and per_query["RR@10"]["q3"] == 0.0


def _group(qrels_iter):
    grouped = {}
    for qrel in qrels_iter:
        grouped.setdefault(qrel.query_id, {})[qrel.doc_id] = qrel.relevance
    return grouped.items()


def test_evaluate_matches_ir_measures_on_its_own_run_and_brute_force(encoder, tmp_path):
    folder = write_beir(tmp_path / "mini")
    result = evaluate(
        encoder, load_collection(folder), max_length=64, run_path=tmp_path / "run.trec", show_progress=False
    )
    trec_qrels = tmp_path / "qrels.txt"
    trec_qrels.write_text("".join(f"{q} 0 {d} {r}\n" for q, docs in QRELS.items() for d, r in docs.items()))
    expected = ir_measures.calc_aggregate(
        [ir_measures.parse_measure(m) for m in MEASURES],
        ir_measures.read_trec_qrels(str(trec_qrels)),
        ir_measures.read_trec_run(str(tmp_path / "run.trec")),
    )
    for measure, value in expected.items():
        assert result.metrics[str(measure)] == pytest.approx(value)
    assert set(result.per_query["nDCG@10"]) == set(reconcile(load_collection(folder)).qrels)
    assert result.efficiency["docs"] == 8 and result.efficiency["queries"] == 4
    assert result.provenance["queries_unjudged"] == 1

    collection = reconcile(load_collection(folder))
    documents = encoder.encode(collection.corpus.texts, max_length=64, show_progress=False)
    queries = encoder.encode(collection.queries.texts, max_length=64, show_progress=False)
    scores = (queries @ documents.T).toarray()
    run = Run.read(tmp_path / "run.trec")
    for i, query_id in enumerate(collection.queries.ids):
        best = collection.corpus.ids[int(np.argmax(scores[i]))]
        assert run.ranking(query_id)[0] == best
    assert result.efficiency["avg_d_nnz"] == pytest.approx(np.diff(documents.indptr).mean())
    assert result.efficiency["flops"] == pytest.approx(retrieval_flops(queries, documents))


def test_corpus_encoding_is_cached(encoder, tmp_path, monkeypatch):
    folder = write_beir(tmp_path / "mini")
    first = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    encoded = []
    original = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts, **kw: encoded.append(len(texts)) or original(texts, **kw))
    second = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    assert not first.provenance["corpus_cached"] and second.provenance["corpus_cached"]
    assert encoded == [4]  # only the queries were encoded again
    assert second.metrics == first.metrics and second.provenance["cache_dir"].startswith(str(tmp_path / "cache"))
    third = evaluate(encoder, load_collection(folder), max_length=32, show_progress=False)
    assert not third.provenance["corpus_cached"] and encoded[1:] == [8, 4]  # another max length is another entry


def test_max_active_dims_prunes_queries_and_documents_after_the_cache(encoder, tmp_path):
    folder = write_beir(tmp_path / "mini")
    full = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    assert full.efficiency["avg_d_nnz"] > 3 and full.provenance["max_active_dims"] is None
    pruned = evaluate(encoder, load_collection(folder), max_length=64, max_active_dims=3, show_progress=False)
    assert pruned.efficiency["avg_d_nnz"] <= 3 and pruned.efficiency["avg_q_nnz"] <= 3
    assert pruned.provenance["max_active_dims"] == 3
    # one cache entry serves every max_active_dims, and it keeps the full vectors
    assert pruned.provenance["corpus_cached"] and pruned.provenance["cache_dir"] == full.provenance["cache_dir"]
    assert Vectors.load(pruned.provenance["cache_dir"]).avg_nnz == pytest.approx(full.efficiency["avg_d_nnz"])

    collection = reconcile(load_collection(folder))
    documents = keep_top_weights(encoder.encode(collection.corpus.texts, max_length=64, show_progress=False), 3)
    queries = keep_top_weights(encoder.encode(collection.queries.texts, max_length=64, show_progress=False), 3)
    assert pruned.efficiency["flops"] == pytest.approx(retrieval_flops(queries, documents))
    hits = ExactSearcher.build(documents).search(queries, k=1000)
    run = Run.from_hits(collection.queries.ids, collection.corpus.ids, hits.doc_indices, hits.scores)
    assert pruned.metrics == compute_metrics(collection.qrels, run, MEASURES)[0]
    with pytest.raises(SpladekitError, match="max_active_dims must be a whole number >= 1, got 0"):
        evaluate(encoder, load_collection(folder), max_active_dims=0, show_progress=False)


def test_queries_use_the_query_limit(model_dir, tmp_path):
    folder = write_beir(tmp_path / "mini")
    collection = reconcile(load_collection(folder))

    def q_nnz(max_length):
        return float(
            np.diff(encoder.encode(collection.queries.texts, max_length=max_length, show_progress=False).indptr).mean()
        )

    encoder = SparseEncoder.from_pretrained(model_dir, max_length=64)
    assert q_nnz(8) != q_nnz(64)  # 8 tokens truncate the queries
    default = evaluate(encoder, collection, show_progress=False)  # no query limit recorded: as before the sides
    assert default.provenance["max_length"] == default.provenance["query_max_length"] == 64
    assert default.efficiency["avg_q_nnz"] == pytest.approx(q_nnz(64))
    both = evaluate(encoder, collection, max_length=8, show_progress=False)  # --doc-max-length alone: both sides
    assert both.provenance["query_max_length"] == 8 and both.efficiency["avg_q_nnz"] == pytest.approx(q_nnz(8))
    queries_only = evaluate(encoder, collection, query_max_length=8, show_progress=False)
    assert queries_only.provenance["max_length"] == 64 and queries_only.provenance["query_max_length"] == 8
    assert queries_only.efficiency["avg_q_nnz"] == pytest.approx(q_nnz(8))
    assert queries_only.efficiency["avg_d_nnz"] == pytest.approx(default.efficiency["avg_d_nnz"])
    recorded = SparseEncoder.from_pretrained(model_dir, max_length=64, query_max_length=8)
    assert evaluate(recorded, collection, show_progress=False).efficiency["avg_q_nnz"] == pytest.approx(q_nnz(8))


def test_cache_entry_depends_on_the_pooling(model_dir, tmp_path):
    folder = write_beir(tmp_path / "mini")
    fused = evaluate(
        SparseEncoder.from_pretrained(model_dir), load_collection(folder), max_length=64, show_progress=False
    )
    screened = evaluate(
        SparseEncoder.from_pretrained(model_dir, pooling="fused-bf16"),
        load_collection(folder),
        max_length=64,
        show_progress=False,
    )
    assert not screened.provenance["corpus_cached"]
    assert screened.provenance["cache_dir"] != fused.provenance["cache_dir"]


def test_unknown_qrels_are_warned_and_the_rest_evaluated(encoder, tmp_path, caplog):
    qrels = dict(QRELS, q404={"d1": 1}, q1={"d1": 1, "ghost": 1})
    result = evaluate(
        encoder, load_collection(write_beir(tmp_path / "mini", qrels=qrels)), max_length=64, show_progress=False
    )
    provenance = result.provenance
    assert (provenance["qrels_unknown_queries"], provenance["qrels_unknown_docs"], result.efficiency["queries"]) == (
        1,
        1,
        4,
    )
    assert "not in the queries file" in caplog.text and "not in the corpus" in caplog.text


def test_suite_mean(encoder, tmp_path):
    one = load_collection(write_beir(tmp_path / "one"))
    two = load_collection(write_beir(tmp_path / "two", qrels={"q1": {"d1": 1}, "q3": {"d8": 1}}))
    result = evaluate_suite(encoder, [one, two], "pair", max_length=64, show_progress=False)
    assert set(result.members) == {"one", "two"}
    one, two = result.members["one"], result.members["two"]
    for measure in MEASURES:
        assert result.metrics[measure] == pytest.approx((one.metrics[measure] + two.metrics[measure]) / 2)
    for key in ("flops", "avg_q_nnz"):
        assert result.efficiency[key] == pytest.approx((one.efficiency[key] + two.efficiency[key]) / 2)
    with pytest.raises(SpladekitError, match="no collection"):
        evaluate_suite(encoder, [], "empty", max_length=64, show_progress=False)


def test_evaluation_result_json_round_trip(encoder, tmp_path):
    one = load_collection(write_beir(tmp_path / "one"))
    two = load_collection(write_beir(tmp_path / "two", qrels={"q1": {"d1": 1}, "q3": {"d8": 1}}))
    result = evaluate_suite(encoder, [one, two], "pair", max_length=64, show_progress=False)
    back = EvaluationResult.load(result.save(tmp_path / "result.json"))
    assert back.to_dict() == json.loads(json.dumps(result.to_dict()))
    assert back.members["two"].per_query == result.members["two"].per_query
    assert back.members["one"].metrics == result.members["one"].metrics


def test_evaluation_result_reads_files_written_before_measures_were_recorded():
    legacy = {
        "name": "scifact",
        "nDCG@10": 0.6,
        "RR@10": 0.5,
        "R(rel=2)@1000": 0.9,
        "flops": 3.0,
        "docs": 10,
        "queries": 2,
        "backend": "exact",
        "k": 1000,
    }
    result = EvaluationResult.from_dict(legacy)
    assert result.measures == ("nDCG@10", "RR@10", "R(rel=2)@1000")
    assert result.efficiency == {"flops": 3.0, "docs": 10, "queries": 2}
    assert result.provenance == {"backend": "exact", "k": 1000}


def test_cli_evaluate_json_and_table(model_dir, tmp_path, cli):
    folder = write_beir(tmp_path / "mini")
    out = tmp_path / "results.json"
    done = cli(
        "evaluate",
        model_dir,
        "--data",
        folder,
        "--doc-max-length",
        64,
        "--run-dir",
        tmp_path / "runs",
        "--json-out",
        out,
    )
    assert done.returncode == 0, done.stderr
    assert "mini" in done.stdout and "nDCG@10" in done.stdout and "flops" in done.stdout  # the table
    results = json.loads(out.read_text())
    for key in ("nDCG@10", "RR@10", "R@1000", "flops", "avg_q_nnz", "avg_d_nnz", "docs", "queries"):
        assert key in results
    assert (tmp_path / "runs" / "mini.trec").is_file()
    assert results["run"] == str(tmp_path / "runs" / "mini.trec")  # the final path, not the staging one
    missing = cli("evaluate", model_dir, "--data", folder, "--split", "dev", "--json")
    assert missing.returncode == 2 and "no split 'dev'; available: test" in missing.stderr


def test_cli_index_search_and_vocabulary_mismatch(model_dir, encoder, tmp_path, cli):
    folder = write_beir(tmp_path / "mini")
    collection = load_collection(folder)
    vectors = encoder.encode(collection.corpus.texts, max_length=64, show_progress=False)
    Vectors(vectors, collection.corpus.ids, {"model": str(model_dir)}).save(tmp_path / "vectors")
    done = cli("index", tmp_path / "vectors", "--output", tmp_path / "index", "--backend", "exact", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["docs"] == 8
    done = cli(
        "search",
        tmp_path / "index",
        "--model",
        model_dir,
        "--queries",
        folder / "queries.jsonl",
        "--query-max-length",
        64,
        "--hits",
        3,
        "--output",
        tmp_path / "run.trec",
    )
    assert done.returncode == 0, done.stderr
    run = Run.read(tmp_path / "run.trec")
    assert set(run.scores) == set(collection.queries.ids) and all(len(hits) <= 3 for hits in run.scores.values())
    again = (
        "search",
        tmp_path / "index",
        "--query-vectors",
        tmp_path / "vectors",
        "--hits",
        2,
        "--output",
        tmp_path / "run.trec",
    )
    done = cli(*again)  # an existing run file is not replaced silently
    assert done.returncode == 2 and "already exists" in done.stderr and "--overwrite" in done.stderr
    assert Run.read(tmp_path / "run.trec").scores == run.scores
    done = cli(*again, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert all(len(hits) == 2 for hits in Run.read(tmp_path / "run.trec").scores.values())

    other = ExactSearcher.build(sp.random(8, encoder.vocab_size + 5, density=0.3, format="csr", random_state=0))
    other.doc_ids = collection.corpus.ids
    other.save(tmp_path / "other")
    done = cli(
        "search",
        tmp_path / "other",
        "--model",
        model_dir,
        "--queries",
        folder / "queries.jsonl",
        "--output",
        tmp_path / "run2.trec",
    )
    assert done.returncode == 2 and "vocabulary mismatch" in done.stderr
    assert not (tmp_path / "run2.trec").exists()


def test_cli_evaluate_checks_its_outputs_before_the_work(model_dir, tmp_path, cli):
    folder = write_beir(tmp_path / "mini")
    (tmp_path / "results.json").write_text("keep")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "old.trec").write_text("keep")
    mark_output(tmp_path / "runs")  # as an earlier evaluate wrote it: --overwrite may replace it
    done = cli("evaluate", model_dir, "--data", folder, "--json-out", tmp_path / "results.json")
    assert done.returncode == 2 and "results.json: output already exists" in done.stderr
    done = cli("evaluate", model_dir, "--data", folder, "--run-dir", tmp_path / "runs")
    assert done.returncode == 2 and "runs: output already exists" in done.stderr
    done = cli("evaluate", model_dir, "--data", folder, "--json-out", tmp_path / "runs", "--overwrite")
    assert done.returncode == 2 and "is a folder" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "results.json").read_text() == "keep" and (tmp_path / "runs" / "old.trec").read_text() == "keep"
    done = cli(
        "evaluate",
        model_dir,
        "--data",
        folder,
        "--doc-max-length",
        64,
        "--json-out",
        tmp_path / "results.json",
        "--run-dir",
        tmp_path / "runs",
        "--overwrite",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "results.json").read_text())["queries"] == 4
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [OUTPUT_MARK, "mini.trec"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("damage", ["empty", "truncated", "foreign ids"])
def test_damaged_cache_entry_is_warned_about_ignored_and_replaced(encoder, tmp_path, caplog, damage):
    """A cache entry is derived data: a damaged one is re-encoded (nothing to lose), not a dead end."""
    folder = write_beir(tmp_path / "mini")
    first = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    entry = Path(first.provenance["cache_dir"])
    shard = entry / "shards" / "00000"  # the cache entry is a sharded vectors folder
    if damage == "foreign ids":
        (shard / "ids.json").write_text(json.dumps([f"x{i}" for i in range(8)]))
    else:
        data = (shard / "vectors.npz").read_bytes()
        (shard / "vectors.npz").write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    again = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    assert "ignoring a damaged evaluation cache entry, re-encoding" in caplog.text and str(entry) in caplog.text
    assert not again.provenance["corpus_cached"] and again.metrics == first.metrics
    assert Vectors.load(entry).ids == load_collection(folder).corpus.ids  # the entry was rewritten whole
    third = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    assert third.provenance["corpus_cached"]


def test_an_interrupted_cache_entry_resumes_its_finished_shards(encoder, tmp_path, monkeypatch):
    import shutil

    import spladekit.evaluation.evaluate as evaluation

    monkeypatch.setattr(evaluation, "DEFAULT_SHARD_SIZE", 3)  # 8 documents: shards of 3, 3, 2
    folder = write_beir(tmp_path / "mini")
    first = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    entry = Path(first.provenance["cache_dir"])
    kept = (entry / "shards" / "00000" / "vectors.npz").stat().st_mtime_ns
    (entry / "manifest.json").unlink()  # as if killed while shard 1 was being encoded
    shutil.rmtree(entry / "shards" / "00001")
    again = evaluate(encoder, load_collection(folder), max_length=64, show_progress=False)
    assert not again.provenance["corpus_cached"] and again.metrics == first.metrics
    assert (entry / "shards" / "00000" / "vectors.npz").stat().st_mtime_ns == kept  # reused, not re-encoded
    assert (entry / "shards" / "00001" / "shard.json").is_file() and (entry / "manifest.json").is_file()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"nDCG@10": "high"}, "'nDCG@10' must be a number, got 'high'"),
        ({"flops": None}, "'flops' must be a number, got null"),
        ({"encode_docs_seconds": "fast"}, "'encode_docs_seconds' must be a number or null"),
        ({"name": ["x"]}, "'name' must be a string or null, got a JSON list"),
        ({"per_query": {"nDCG@10": {"q1": "one"}}}, "'per_query.nDCG@10'['q1'] must be a number"),
        ({"per_query": [1]}, "'per_query' must be a JSON object"),
        ({"measures": "nDCG@10"}, "'measures' must list measure names"),
        (
            {"datasets": {"one": {"name": "one", "measures": ["nDCG@10"], "nDCG@10": True}}},
            "'datasets.one.nDCG@10' must be a number, got True",
        ),
    ],
)
def test_evaluation_result_refuses_values_of_the_wrong_type(change, message):
    payload = {"name": "mini", "measures": ["nDCG@10"], "nDCG@10": 0.5, "flops": 1.0, "docs": 8, "queries": 4} | change
    with pytest.raises(InputError, match=re.escape(f"result.json: {message}")):
        EvaluationResult.from_dict(payload, "result.json")


def test_cli_evaluate_refuses_a_query_id_with_whitespace_with_file_and_line(model_dir, tmp_path, cli):
    folder = write_beir(tmp_path / "mini", queries={"q1": "capital of france", "q\t2": "a vaccine"})
    done = cli("evaluate", model_dir, "--data", folder, "--json-out", tmp_path / "results.json")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {folder / 'queries.jsonl'}:2: field '_id' 'q\\t2' contains "
        "whitespace, which a TREC run or qrels line cannot carry"
    ]
    assert not (tmp_path / "results.json").exists()


def test_cli_index_max_active_dims_is_applied_and_recorded_and_search_encodes_queries_as_queries(
    model_dir, tmp_path, cli
):
    from spladekit.index import load_index
    from spladekit.index.store import read_manifest

    folder = write_beir(tmp_path / "mini")
    collection = load_collection(folder)
    model = SparseEncoder.from_pretrained(model_dir, max_length=64, query_max_length=8).save(tmp_path / "model")
    encoder = SparseEncoder.from_pretrained(model)
    documents = encoder.encode_document(collection.corpus.texts, show_progress=False)
    Vectors(documents, collection.corpus.ids, {"model": str(model)}).save(tmp_path / "vectors")

    done = cli("index", tmp_path / "vectors", "--output", tmp_path / "index", "--max-active-dims", 2, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["max_active_dims"] == 2 and json.loads(done.stdout)["postings"] <= 2 * 8
    assert read_manifest(tmp_path / "index")["meta"]["max_active_dims"] == 2
    queries = encoder.encode_query(collection.queries.texts, show_progress=False)
    expected = ExactSearcher.build(keep_top_weights(documents, 2)).search(queries, k=8)
    found = load_index(tmp_path / "index").search(queries, k=8)
    np.testing.assert_array_equal(found.doc_indices, expected.doc_indices)
    done = cli("index", tmp_path / "vectors", "--output", tmp_path / "bad", "--max-active-dims", -1)
    assert done.returncode == 2 and "max_active_dims must be a whole number >= 1, got -1" in done.stderr
    assert not (tmp_path / "bad").exists()

    # search --model encodes queries with the query limit: the same run as `encode --side query` vectors
    done = cli("encode", model, "--corpus", folder / "queries.jsonl", "--side", "query", "--output", tmp_path / "q")
    assert done.returncode == 0, done.stderr
    done = cli(
        "search",
        tmp_path / "index",
        "--model",
        model,
        "--queries",
        folder / "queries.jsonl",
        "--output",
        tmp_path / "model.trec",
    )
    assert done.returncode == 0, done.stderr
    done = cli("search", tmp_path / "index", "--query-vectors", tmp_path / "q", "--output", tmp_path / "vectors.trec")
    assert done.returncode == 0, done.stderr
    assert Run.read(tmp_path / "model.trec").scores == Run.read(tmp_path / "vectors.trec").scores
    assert Vectors.load(tmp_path / "q").meta["max_length"] == 8


def test_cli_evaluate_max_active_dims(model_dir, tmp_path, cli):
    folder = write_beir(tmp_path / "mini")
    done = cli("evaluate", model_dir, "--data", folder, "--doc-max-length", 64, "--max-active-dims", 3, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["max_active_dims"] == 3 and result["avg_d_nnz"] <= 3 and result["avg_q_nnz"] <= 3
    done = cli("evaluate", model_dir, "--data", folder, "--max-active-dims", 3)
    assert done.returncode == 0 and "max active dims 3" in done.stdout, done.stderr


# ----------------------------------------------------------------------------------------- self-hits
SELF_HIT_DOCS = {
    "1": ("", "paris is the capital of france"),
    "2": ("", "capital city of france is paris"),
    "3": ("", "cats sleep all day long"),
    "4": ("", "dogs bark at the postman"),
}
SELF_HIT_QUERIES = {"1": "paris is the capital of france", "3": "cats sleep all day long"}
SELF_HIT_QRELS = {"1": {"2": 1, "1": 1}, "3": {"4": 1}}


@pytest.mark.parametrize("name, dropped", [("arguana", True), ("NanoQuoraRetrieval", True), ("cranfield", False)])
def test_the_querys_own_document_leaves_its_ranking_only_where_the_collection_says_so(encoder, tmp_path, name, dropped):
    """ArguAna/Quora (queries are corpus documents): as BEIR, the same-id document is not ranked. Cranfield-like
    numbering (query 1 and document 1 unrelated by construction) keeps it: there it can be truly relevant."""
    collection = load_collection(write_beir(tmp_path / name, SELF_HIT_DOCS, SELF_HIT_QUERIES, SELF_HIT_QRELS))
    assert collection.drop_self_hits is dropped
    result = evaluate(encoder, collection, k=3, run_path=tmp_path / "run.trec", cache=False, show_progress=False)
    run = Run.read(tmp_path / "run.trec")
    assert all((query in run.ranking(query)) is not dropped for query in SELF_HIT_QUERIES)
    assert all(len(run.ranking(query)) == 3 for query in SELF_HIT_QUERIES)  # k others, not k - 1
    assert result.provenance["self_hits_removed"] == (2 if dropped else None)
    # the metrics are those of the run as written: ir_measures on it agrees
    assert result.metrics == pytest.approx(compute_metrics(collection.qrels, run, MEASURES)[0])


def test_without_self_hits_keeps_order_and_cuts_to_k():
    run = Run({"q": {"a": 3.0, "q": 2.0, "b": 1.0, "c": 0.5}, "r": {"a": 1.0}})
    kept, dropped = run.without_self_hits(2)
    assert kept.scores == {"q": {"a": 3.0, "b": 1.0}, "r": {"a": 1.0}} and dropped == 1


def test_bf16_encoding_is_close_to_fp32_and_recorded_where_the_vectors_are(model_dir, tmp_path, monkeypatch):
    """--bf16 (autocast) changes the last bits: never mixed with fp32 vectors in the cache or a resumed folder."""
    from spladekit.common.errors import SpladekitError
    from spladekit.vectors.encoding import encode_to_shards

    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    folder = write_beir(tmp_path / "mini")
    fp32, bf16 = SparseEncoder.from_pretrained(model_dir), SparseEncoder.from_pretrained(model_dir, bf16=True)
    texts = load_collection(folder).corpus.texts
    a = fp32.encode(texts, show_progress=False).toarray()
    b = bf16.encode(texts, show_progress=False).toarray()
    assert not np.array_equal(a, b)  # bf16 really ran
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.99
    results = [evaluate(encoder, load_collection(folder), show_progress=False) for encoder in (fp32, bf16)]
    assert [result.provenance["bf16"] for result in results] == [False, True]
    assert results[0].provenance["cache_dir"] != results[1].provenance["cache_dir"]
    encode_to_shards(str(model_dir), folder / "corpus.jsonl", tmp_path / "vectors", bf16=True, show_progress=False)
    assert json.loads((tmp_path / "vectors" / "manifest.json").read_text())["plan"]["precision"] == "bf16"
    with pytest.raises(SpladekitError, match="--precision bf16, not fp32"):  # resuming in fp32: another plan
        encode_to_shards(
            str(model_dir), folder / "corpus.jsonl", tmp_path / "vectors", resume=True, show_progress=False
        )


@pytest.mark.slow
def test_evaluate_under_torchrun_encodes_on_every_rank_and_reports_once(model_dir, tmp_path):
    """Two gloo ranks split a 3-shard corpus in the shared cache; rank 0 alone scores and prints: the same
    result as one process."""
    import os
    import subprocess
    import sys

    from collection_files import DOCS

    docs = {**DOCS, **{f"x{i}": ("", f"filler document {i} about nothing in particular") for i in range(20_000)}}
    folder = write_beir(tmp_path / "big", docs=docs)
    src = Path(__file__).resolve().parents[2] / "src"
    (tmp_path / "tmp").mkdir()  # torchrun's own temporary folders (torchelastic_*) go here, not into $TMPDIR
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    env["SPLADEKIT_CACHE"] = str(tmp_path / "cache")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]
    command += ["spladekit", "evaluate", str(model_dir), "--data", str(folder), "--json", "--device", "cpu"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and ("init_process_group" in done.stderr or "rendezvous" in done.stderr.lower()):
        pytest.skip(f"torchrun could not start two gloo processes here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    ranked = json.loads(done.stdout)  # one JSON document: only rank 0 reports
    assert ranked["corpus_cached"] is False and len(list(Path(ranked["cache_dir"]).glob("shards/*/shard.json"))) == 3
    encoder = SparseEncoder.from_pretrained(model_dir)
    collection = load_collection(folder)
    cached = Vectors.load(ranked["cache_dir"])  # shards 0 and 2 from rank 0, shard 1 from rank 1
    expected = encoder.encode_document(collection.corpus.texts, show_progress=False)
    assert cached.ids == collection.corpus.ids and abs(cached.matrix - expected).max() < 1e-5
    alone = evaluate(encoder, collection, cache=False, show_progress=False)
    assert ranked["per_query"] == alone.per_query
