"""Every command against a table of bad inputs: exit 2, exactly one `error:` line, no traceback, nothing written.

Run in-process through the console script's `main()` (the same code path as `spladekit …`): an exception
that is not a clear error escapes `main()` and fails the test with its traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from collection_files import write_beir
from spladekit.cli import main
from spladekit.data.samples import SAMPLE_PAIRS
from spladekit.model.encoder import SparseEncoder
from spladekit.vectors.artifact import Vectors
from spladekit.vectors.encoding import encode_to_shards
from tiny_models import build_tiny_model


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Good inputs that each case damages in one way: a tiny model, a collection, vectors, an index, triplets."""
    root = tmp_path_factory.mktemp("world")
    model = build_tiny_model("bert", root / "model")
    beir = write_beir(root / "beir")
    encoder = SparseEncoder.from_pretrained(model)
    texts = ["paris is the capital of france", "a vaccine trains the immune system"]
    Vectors(encoder.encode(texts, show_progress=False), ["d1", "d2"], {"model": str(model)}).save(root / "vectors")
    encode_to_shards(str(model), beir / "corpus.jsonl", root / "sharded", shard_size=4, show_progress=False)
    triplets = root / "triplets.tsv"
    triplets.write_text(
        "".join(f"{q}\t{d}\t{SAMPLE_PAIRS[(i + 1) % 12][1]}\n" for i, (q, d) in enumerate(SAMPLE_PAIRS))
    )
    config = {"backbone": {"id": str(model)}, "data": {"path": str(triplets)}, "optimization": {"steps": 1}}
    (root / "train.yaml").write_text(yaml.safe_dump(config))
    return {
        "root": root,
        "model": model,
        "beir": beir,
        "vectors": root / "vectors",
        "triplets": triplets,
        "train": root / "train.yaml",
        "sharded": root / "sharded",
    }


def other_model_interrupted(folder: Path) -> None:
    """An interrupted sharded encode (no manifest) whose shards record another model's weights hash."""
    (folder / "manifest.json").unlink()
    sidecar = folder / "shards" / "00000" / "shard.json"
    record = json.loads(sidecar.read_text())
    record["plan"]["model_sha256"] = "0" * 64
    sidecar.write_text(json.dumps(record))


def relabelled_npz(folder: Path) -> None:
    """Shard 1's vectors.npz with its first zip header claiming a 65,535-byte file name, and the checksums
    updated to match: zipfile then quotes ~13 KB of the file in its error (today's message)."""
    import hashlib

    npz = folder / "shards" / "00001" / "vectors.npz"
    before = hashlib.sha256(npz.read_bytes()).hexdigest()
    data = bytearray(npz.read_bytes())
    data[26:28] = b"\xff\xff"  # the local file header's file-name length
    npz.write_bytes(bytes(data))
    for record in (folder / "shards" / "00001" / "shard.json", folder / "manifest.json"):
        record.write_text(record.read_text().replace(before, hashlib.sha256(bytes(data)).hexdigest()))


def damaged_copy(source: Path, target: Path, change: Callable[[Path], None]) -> Path:
    """A copy of the folder ``source`` with ``change`` applied to it."""
    import shutil

    shutil.copytree(source, target)
    change(target)
    return target


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def users_folder(tmp: Path) -> Path:
    """A folder of the user's own files (not one spladekit wrote): never written into, never replaced."""
    write(tmp / "mine" / "thesis.tex", "years of work")
    return tmp / "mine"


def corpus(tmp: Path, lines: list[str] | bytes) -> Path:
    return write(tmp / "bad" / "corpus.jsonl", lines if isinstance(lines, bytes) else "\n".join(lines) + "\n")


def truncate_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def retype_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"hidden_size": "wide"}))


def sweep_file(tmp: Path, world: dict, **changes) -> Path:
    sweep = {
        "name": "s",
        "recipe": {"data": {"path": str(world["triplets"])}, "optimization": {"steps": 1}},
        "backbones": [{"name": "b", "id": str(world["model"])}],
        "k": [1],
    } | changes
    return write(tmp / "bad" / "sweep.yaml", yaml.safe_dump(sweep))


def empty_vectors(tmp: Path, world: dict) -> Path:
    """A vectors folder holding no vector, in the vocabulary of the world's vectors."""
    import numpy as np
    import scipy.sparse as sp

    vocab = Vectors.load(world["vectors"]).vocab_size
    return Vectors(sp.csr_matrix((0, vocab), dtype=np.float32), []).save(tmp / "bad" / "empty")


def exact_index(tmp: Path, world: dict) -> Path:
    """An exact index of the world's vectors."""
    from spladekit.index import build_index

    vectors = Vectors.load(world["vectors"])
    searcher = build_index(vectors.matrix)
    searcher.doc_ids = vectors.ids
    return searcher.save(tmp / "bad" / "index")


def bad_sweep_folder(tmp: Path, record: str) -> Path:
    write(tmp / "bad" / "sweep" / "runs" / "b__k1__none" / "run.json", record)
    return tmp / "bad" / "sweep"


# (case id, arguments builder (tmp, world) -> command line; OUT marks where nothing may appear, what the error says)
CASES: list[tuple[str, Callable[[Path, dict], list], str]] = [
    # diagnose
    (
        "diagnose-missing-model",
        lambda t, w: ["diagnose", t / "nope" / "model", "--json-out", t / "OUT.json"],
        "no such model folder",
    ),
    (
        "diagnose-no-weights",
        lambda t, w: ["diagnose", write(t / "bad" / "config.json", "{}").parent, "--json-out", t / "OUT.json"],
        "no model weights",
    ),
    (
        "diagnose-truncated-safetensors",
        lambda t, w: ["diagnose", damaged_copy(w["model"], t / "bad", truncate_weights), "--json-out", t / "OUT.json"],
        "model.safetensors",
    ),
    (
        "diagnose-config-wrong-type",
        lambda t, w: ["diagnose", damaged_copy(w["model"], t / "bad", retype_config), "--json-out", t / "OUT.json"],
        "config.json",
    ),
    (
        "diagnose-bad-sample",
        lambda t, w: [
            "diagnose",
            w["model"],
            "--sample",
            write(t / "bad" / "s.tsv", "only one field\n"),
            "--json-out",
            t / "OUT.json",
        ],
        "s.tsv:1:",
    ),
    (
        "diagnose-bad-mode",
        lambda t, w: ["diagnose", w["model"], "--mode", "sideways", "--json-out", t / "OUT.json"],
        "mode must be one of tied, untie, auto, got 'sideways'",
    ),
    # rescale
    ("rescale-k-zero", lambda t, w: ["rescale", w["model"], "--k", "0", "--output", t / "OUT"], "k must be a positive"),
    (
        "rescale-k-text",
        lambda t, w: ["rescale", w["model"], "--k", "abc", "--output", t / "OUT"],
        "k must be a positive",
    ),
    ("rescale-k-overflows", lambda t, w: ["rescale", w["model"], "--k", "1e-36", "--output", t / "OUT"], "1e-36"),
    (
        "rescale-bad-mode",
        lambda t, w: ["rescale", w["model"], "--k", "2", "--mode", "sideways", "--output", t / "OUT"],
        "sideways",
    ),
    # encode
    (
        "encode-invalid-json",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            corpus(t, ['{"_id": "a", "text": "x"}', "{oops"]),
            "--output",
            t / "OUT",
        ],
        "corpus.jsonl:2: not valid JSON",
    ),
    (
        "encode-missing-id",
        lambda t, w: ["encode", w["model"], "--corpus", corpus(t, ['{"text": "x"}']), "--output", t / "OUT"],
        "corpus.jsonl:1: missing field '_id'",
    ),
    (
        "encode-duplicate-id",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            corpus(t, ['{"_id": "a", "text": "x"}', '{"_id": "a", "text": "y"}']),
            "--output",
            t / "OUT",
        ],
        "corpus.jsonl:2: duplicate id",
    ),
    (
        "encode-id-with-space",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            corpus(t, ['{"_id": "a b", "text": "x"}']),
            "--output",
            t / "OUT",
        ],
        "corpus.jsonl:1:",
    ),
    (
        "encode-id-with-newline",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            corpus(t, ['{"_id": "a\\nb", "text": "x"}']),
            "--output",
            t / "OUT",
        ],
        "corpus.jsonl:1:",
    ),
    (
        "encode-not-utf8",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            corpus(t, b'{"_id": "a", "text": "caf\xe9"}\n'),
            "--output",
            t / "OUT",
        ],
        "corpus.jsonl:1: not valid UTF-8",
    ),
    (
        "encode-empty-corpus",
        lambda t, w: ["encode", w["model"], "--corpus", corpus(t, b""), "--output", t / "OUT"],
        "empty corpus",
    ),
    (
        "encode-unknown-pooling",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--pooling",
            "avg",
            "--output",
            t / "OUT",
        ],
        "unknown pooling",
    ),
    (
        "encode-unknown-side",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--side",
            "passage",
            "--output",
            t / "OUT",
        ],
        "unknown side 'passage'",
    ),
    (
        "encode-unknown-device",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--device",
            "tpu9",
            "--output",
            t / "OUT",
        ],
        "unknown device 'tpu9'",
    ),
    (
        "encode-max-active-dims-zero",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--max-active-dims",
            "0",
            "--output",
            t / "OUT",
        ],
        "max_active_dims",
    ),
    (
        "encode-shard-out-of-range",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--shard",
            "3/2",
            "--output",
            t / "OUT",
        ],
        "--shard must be I/N",
    ),
    (
        "encode-shard-size-zero",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--shard-size",
            "0",
            "--output",
            t / "OUT",
        ],
        "--shard-size must be",
    ),
    (
        "encode-resume-with-overwrite",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--resume",
            "--overwrite",
            "--output",
            t / "OUT",
        ],
        "give only one",
    ),
    (
        "encode-resume-another-model",
        lambda t, w: [
            "encode",
            w["model"],
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--shard-size",
            "4",
            "--resume",
            "--output",
            damaged_copy(w["sharded"], t / "prior", other_model_interrupted),
        ],
        "differs in: model_sha256",
    ),
    # index
    (
        "index-sharded-relabelled-npz",
        lambda t, w: ["index", damaged_copy(w["sharded"], t / "bad", relabelled_npz), "--output", t / "OUT"],
        "corrupt or unreadable sparse matrix",
    ),
    (
        "index-sharded-checksum",
        lambda t, w: [
            "index",
            damaged_copy(w["sharded"], t / "bad", lambda f: (f / "shards" / "00001" / "vectors.npz").write_bytes(b"x")),
            "--output",
            t / "OUT",
        ],
        "sha256 mismatch",
    ),
    ("index-not-vectors", lambda t, w: ["index", w["beir"], "--output", t / "OUT"], "not a spladekit vectors folder"),
    (
        "index-empty-npz",
        lambda t, w: [
            "index",
            damaged_copy(w["vectors"], t / "bad", lambda f: (f / "vectors.npz").write_bytes(b"")),
            "--output",
            t / "OUT",
        ],
        "vectors.npz",
    ),
    (
        "index-negative-param",
        lambda t, w: ["index", w["vectors"], "--param", "query_batch=-5", "--output", t / "OUT"],
        "query_batch",
    ),
    (
        "index-milvus-bad-param",
        lambda t, w: ["index", w["vectors"], "--backend", "milvus", "--param", "batch_size=bad", "--output", t / "OUT"],
        "milvus parameter batch_size=bad",
    ),
    (
        "index-milvus-local-uri",
        lambda t, w: ["index", w["vectors"], "--backend", "milvus", "--param", "uri=./x.db", "--output", t / "OUT"],
        "must be a Milvus server URL",
    ),
    (  # today: the index was refused only when every weight rounded away, any lesser loss was silent
        "index-pisa-scale-rounds-everything-away",
        lambda t, w: ["index", w["vectors"], "--backend", "pisa", "--param", "scale=1e-6", "--output", t / "OUT"],
        "pisa index: 100.0% of the 208 non-zero weights round to 0 at quantization scale 1e-06",
    ),
    (
        "index-pisa-bad-encoding",
        lambda t, w: ["index", w["vectors"], "--backend", "pisa", "--param", "encoding=zip", "--output", t / "OUT"],
        "pisa parameter encoding=zip: must be one of 'block_simdbp', ",
    ),
    (
        "index-anserini-scale-rounds-everything-away",
        lambda t, w: ["index", w["vectors"], "--backend", "anserini", "--param", "scale=1e-6", "--output", t / "OUT"],
        "anserini index: 100.0% of the 208 non-zero weights round to 0 at quantization scale 1e-06",
    ),
    (  # today: the user's folder was replaced by the index, and deleted
        "index-overwrite-a-folder-spladekit-did-not-write",
        lambda t, w: ["index", w["vectors"], "--output", users_folder(t), "--overwrite"],
        "not a folder spladekit wrote",
    ),
    (
        "index-unknown-backend",
        lambda t, w: ["index", w["vectors"], "--backend", "faiss", "--output", t / "OUT"],
        "unknown backend",
    ),
    (  # today: an exact index of no document, exit 0
        "index-no-documents",
        lambda t, w: ["index", empty_vectors(t, w), "--output", t / "OUT"],
        "no document vectors: nothing to index",
    ),
    (  # Anserini writes each term impact times into one Java string: past 2^31 characters an IndexCollection failure
        "index-anserini-document-too-long-for-java",
        lambda t, w: ["index", w["vectors"], "--backend", "anserini", "--param", "scale=1e8", "--output", t / "OUT"],
        "the most an anserini index can hold; lower --param scale to ",
    ),
    (
        "index-max-active-dims-negative",
        lambda t, w: ["index", w["vectors"], "--max-active-dims", "-2", "--output", t / "OUT"],
        "max_active_dims must be a whole number >= 1, got -2",
    ),
    # search
    (
        "search-not-an-index",
        lambda t, w: ["search", w["vectors"], "--query-vectors", w["vectors"], "--output", t / "OUT.trec"],
        "not a spladekit index folder",
    ),
    (
        "search-vectors-not-a-folder",
        lambda t, w: ["search", w["vectors"], "--query-vectors", w["triplets"], "--output", t / "OUT.trec"],
        "",
    ),
    (  # today: an empty run file, exit 0
        "search-no-queries",
        lambda t, w: ["search", exact_index(t, w), "--query-vectors", empty_vectors(t, w), "--output", t / "OUT.trec"],
        "no query vectors: nothing to search",
    ),
    (  # --device is checked before any work, on every command that runs a model
        "search-unknown-device",
        lambda t, w: [
            *("search", w["vectors"], "--query-vectors", w["vectors"], "--device", "banana", "--output", t / "OUT")
        ],
        "unknown device 'banana'",
    ),
    # evaluate
    (
        "evaluate-missing-data",
        lambda t, w: ["evaluate", w["model"], "--data", str(t / "nope"), "--json-out", t / "OUT.json"],
        "no such collection folder",
    ),
    (
        "evaluate-dry-run-with-output",
        lambda t, w: ["evaluate", w["model"], "--data", w["beir"], "--dry-run", "--json-out", t / "OUT.json"],
        "--dry-run writes nothing",
    ),
    (
        "evaluate-dry-run-missing-data",
        lambda t, w: ["evaluate", w["model"], "--data", str(t / "nope"), "--dry-run"],
        "no such collection folder",
    ),
    (
        "evaluate-missing-split",
        lambda t, w: ["evaluate", w["model"], "--data", w["beir"], "--split", "dev", "--json-out", t / "OUT.json"],
        "no split 'dev'",
    ),
    (
        "evaluate-bad-qrels",
        lambda t, w: [
            "evaluate",
            w["model"],
            "--data",
            damaged_copy(
                w["beir"], t / "bad", lambda f: write(f / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n")
            ),
            "--json-out",
            t / "OUT.json",
        ],
        "test.tsv:2:",
    ),
    (
        "evaluate-bad-param",
        lambda t, w: [
            "evaluate",
            w["model"],
            "--data",
            w["beir"],
            "--param",
            "query_batch=abc",
            "--json-out",
            t / "OUT.json",
        ],
        "query_batch",
    ),
    (
        "evaluate-max-active-dims-zero",
        lambda t, w: [
            "evaluate",
            w["model"],
            "--data",
            w["beir"],
            "--max-active-dims",
            "0",
            "--json-out",
            t / "OUT.json",
        ],
        "max_active_dims",
    ),
    # train
    (  # today: the user's folder was moved aside and deleted when the new run completed
        "train-overwrite-a-folder-spladekit-did-not-write",
        lambda t, w: ["train", w["train"], "--output", users_folder(t), "--overwrite"],
        "not a folder spladekit wrote",
    ),
    (
        "train-yaml-syntax",
        lambda t, w: ["train", write(t / "bad" / "c.yaml", "backbone: [unclosed\n"), "--output", t / "OUT"],
        "c.yaml:",
    ),
    (
        "train-unknown-device",
        lambda t, w: ["train", w["train"], "--device", "tpu9", "--output", t / "OUT"],
        "unknown device 'tpu9'",
    ),
    (
        "train-unknown-key",
        lambda t, w: ["train", w["train"], "--set", "optimization.lr_rate=1", "--output", t / "OUT"],
        "did you mean",
    ),
    (
        "train-negative-grad-norm",
        lambda t, w: ["train", w["train"], "--set", "optimization.max_grad_norm=-1", "--output", t / "OUT"],
        "max_grad_norm",
    ),
    (
        "train-nan-lambda",
        lambda t, w: ["train", w["train"], "--set", "regularizer.lambda_q=.nan", "--output", t / "OUT"],
        "lambda_q",
    ),
    (
        "train-top-level-list",
        lambda t, w: ["train", write(t / "bad" / "c.yaml", "- a\n- b\n"), "--output", t / "OUT"],
        "c.yaml",
    ),
    (
        "train-malformed-set",
        lambda t, w: ["train", w["train"], "--set", "optimization.steps", "--output", t / "OUT"],
        "section.key=value",
    ),
    (
        "train-missing-data",
        lambda t, w: ["train", w["train"], "--set", f"data.path={t / 'nope.tsv'}", "--output", t / "OUT"],
        "nope.tsv",
    ),
    (
        "evaluate-unknown-device",
        lambda t, w: ["evaluate", w["model"], "--data", w["beir"], "--device", "banana", "--json-out", t / "OUT"],
        "unknown device 'banana'",
    ),
    # sweep and report
    (
        "sweep-dotdot-name",
        lambda t, w: [
            "sweep",
            sweep_file(t, w, backbones=[{"name": "..", "id": str(w["model"])}]),
            "--output",
            t / "OUT",
        ],
        "..",
    ),
    (
        "sweep-k-zero",
        lambda t, w: ["sweep", sweep_file(t, w, k=[0]), "--output", t / "OUT"],
        "config key 'k': expected a list of finite numbers > 0 or 'auto'",
    ),
    (
        "keys-unknown-kind",
        lambda t, w: ["keys", "configs"],
        "unknown kind 'configs'; choose one of train, sweep, backends",
    ),
    ("report-not-a-sweep", lambda t, w: ["report", w["beir"]], "not a sweep folder"),
    ("report-garbage-run-json", lambda t, w: ["report", bad_sweep_folder(t, "{not json")], "run.json"),
    # export
    (
        "export-missing-vectors",
        lambda t, w: ["export", "opensearch", t / "nope", "--output", t / "OUT"],
        "no such vectors folder",
    ),
    ("export-st-without-output", lambda t, w: ["export", "sentence-transformers", w["model"]], "--output"),
    (
        "export-ciff-missing-vectors",
        lambda t, w: ["export", "ciff", t / "nope", "--output", t / "OUT.ciff"],
        "no such vectors folder",
    ),
    (
        "export-ciff-zero-scale",
        lambda t, w: [
            "export",
            "ciff",
            w["vectors"],
            "--output",
            t / "OUT.ciff",
            "--quantization-scale",
            "0",
        ],
        "quantization scale",
    ),
    (
        "export-opensearch-negative-scale",
        lambda t, w: [
            "export",
            "opensearch",
            w["vectors"],
            "--output",
            t / "OUT",
            "--quantization-scale",
            "-3",
        ],
        "quantization scale must be a positive finite number",
    ),
    (
        "export-ciff-nan-scale",
        lambda t, w: [
            "export",
            "ciff",
            w["vectors"],
            "--output",
            t / "OUT.ciff",
            "--quantization-scale",
            "nan",
        ],
        "quantization scale",
    ),
    (  # export qdrant is gone (index --backend qdrant does it): one line saying so, whatever its old options
        "export-qdrant-is-index",
        lambda t, w: ["export", "qdrant", w["vectors"], "--url", "http://localhost:6333", "--collection", "c"],
        "export qdrant is now spladekit index VECTORS --backend qdrant",
    ),
    (  # once (export --format qdrant --qdrant-path .): the working folder (empty here) became the shard
        "index-qdrant-output-is-the-working-folder",
        lambda t, w: ["index", w["vectors"], "--backend", "qdrant", "--output", "."],
        "the working folder",
    ),
    (  # today: "quantization scale 10000000000.0 gives an impact of 8.95e+09", naming no document
        "export-ciff-impact-beyond-int32",
        lambda t, w: ["export", "ciff", w["vectors"], "-o", t / "OUT.ciff", "--quantization-scale", "1e10"],
        "over 2,147,483,647, the largest CIFF can hold; lower --quantization-scale",
    ),
    (  # every weight rounds to 0: today a CIFF with no postings and exit 0
        "export-ciff-scale-rounds-everything-away",
        lambda t, w: ["export", "ciff", w["vectors"], "--output", t / "OUT.ciff", "--quantization-scale", "1e-6"],
        "100.0% of the 208 non-zero weights round to 0 at quantization scale 1e-06",
    ),
    (
        "export-opensearch-scale-rounds-everything-away",
        lambda t, w: [
            "export",
            "opensearch",
            w["vectors"],
            "--output",
            t / "OUT",
            "--quantization-scale",
            "1e-6",
        ],
        "round to 0 at quantization scale 1e-06",
    ),
    (
        "sweep-unknown-device",
        lambda t, w: ["sweep", sweep_file(t, w), "--device", "banana", "--output", t / "OUT"],
        "unknown device 'banana'",
    ),
    (  # today: --dry-run passed (exit 0) a shard the run itself refuses
        "sweep-dry-run-shard-out-of-range",
        lambda t, w: ["sweep", sweep_file(t, w), "--dry-run", "--shard", "3/2", "--output", t / "OUT"],
        "--shard must be I/N with integers 0 <= I < N, got '3/2'",
    ),
    (
        "sweep-dry-run-unknown-device",
        lambda t, w: ["sweep", sweep_file(t, w), "--dry-run", "--device", "banana", "--output", t / "OUT"],
        "unknown device 'banana'",
    ),
    (
        "sweep-dry-run-devices-with-shard",
        lambda t, w: ["sweep", sweep_file(t, w), "--dry-run", "--devices", "cpu", "--shard", "0/2", "-o", t / "OUT"],
        "--devices starts one worker per device",
    ),
    (  # today: nothing ran, exit 0, and OUT/plan.json was written
        "sweep-only-matches-nothing",
        lambda t, w: ["sweep", sweep_file(t, w), "--only", "b__k4", "--output", t / "OUT"],
        "--only 'b__k4' matches no run or baseline of the plan (b__k1__none, b__untouched, bm25)",
    ),
    # explain
    ("serve-missing-model", lambda t, w: ["serve", t / "nope" / "model"], "no such model folder"),
    ("serve-exposed-without-key", lambda t, w: ["serve", w["model"], "--host", "0.0.0.0"], "without an API key"),
    ("serve-collection-without-index", lambda t, w: ["serve", w["model"], "--collection", w["beir"]], "--index"),
    ("serve-bad-precision", lambda t, w: ["serve", w["model"], "--precision", "fp16"], "--precision"),
    ("serve-missing-index", lambda t, w: ["serve", w["model"], "--index", t / "nope" / "index"], "nope"),
    (
        "explain-missing-model",
        lambda t, w: ["explain", t / "nope" / "model", "a query", "--json-out", t / "OUT.json"],
        "no such model folder",
    ),
    (
        "explain-empty-text",
        lambda t, w: ["explain", w["model"], "a query", "  ", "--json-out", t / "OUT.json"],
        "document is empty",
    ),
    (
        "explain-top-zero",
        lambda t, w: ["explain", w["model"], "a query", "--top", "0", "--html", t / "OUT.html"],
        "--top",
    ),
    (
        "explain-html-exists",
        lambda t, w: [
            "explain",
            w["model"],
            "a query",
            "--json-out",
            t / "OUT.json",
            "--html",
            write(t / "page.html", "keep"),
        ],
        "already exists",
    ),
    (
        "explain-unknown-doc-id",
        lambda t, w: [
            "explain",
            w["model"],
            "a query",
            "--corpus",
            w["beir"] / "corpus.jsonl",
            "--doc-id",
            "nope",
            "--json-out",
            t / "OUT.json",
        ],
        "no document with id 'nope'",
    ),
    (
        "explain-three-texts",
        lambda t, w: ["explain", w["model"], "a", "b", "c", "--json-out", t / "OUT.json"],
        "3 texts",
    ),
    (
        "explain-unknown-device",
        lambda t, w: ["explain", w["model"], "a query", "--device", "banana", "--json-out", t / "OUT.json"],
        "unknown device 'banana'",
    ),
    # mine
    (
        "mine-no-train-split",
        lambda t, w: ["mine", w["beir"], "--output", t / "OUT.tsv"],
        "no split 'train'; available: test",
    ),
    (
        "mine-qrels-unknown-document",
        lambda t, w: [
            "mine",
            damaged_copy(
                w["beir"],
                t / "bad",
                lambda f: write(f / "qrels" / "train.tsv", "query-id\tcorpus-id\tscore\nq1\tghost\t1\n"),
            ),
            "--output",
            t / "OUT.tsv",
        ],
        "train.tsv:2: judgment of query 'q1' names document 'ghost'",
    ),
    ("mine-unknown-id", lambda t, w: ["mine", "no-such/collection", "--output", t / "OUT.tsv"], "not a folder"),
    (
        "mine-bad-rank-range",
        lambda t, w: ["mine", w["beir"], "--rank-range", "0:10", "--output", t / "OUT.tsv"],
        "1 <= A <= B",
    ),
    (  # today: a numpy ValueError traceback
        "mine-negative-seed",
        lambda t, w: ["mine", w["beir"], "--seed", "-1", "--output", t / "OUT.tsv"],
        "seed must be an integer in [0, 4294967295], got -1",
    ),
    (
        "mine-seed-above-numpy",
        lambda t, w: ["mine", w["beir"], "--seed", str(2**32), "--output", t / "OUT.tsv"],
        "seed must be an integer in [0, 4294967295], got 4294967296",
    ),
    (
        "mine-unknown-device",
        lambda t, w: ["mine", w["beir"], "--model", w["model"], "--device", "banana", "--output", t / "OUT.tsv"],
        "unknown device 'banana'",
    ),
    # quickstart
    (
        "quickstart-unknown-device",
        lambda t, w: ["quickstart", "--backbone", w["model"], "--device", "banana", "--output", t / "OUT"],
        "unknown device 'banana'",
    ),
    (
        "quickstart-missing-triplets",
        lambda t, w: [
            "quickstart",
            "--backbone",
            w["model"],
            "--train-data",
            w["beir"],
            "--steps",
            "1",
            "--output",
            t / "OUT",
        ],
        "no split 'train'",
    ),
    (
        "quickstart-offline-unknown-model-id",
        lambda t, w: [
            "quickstart",
            "--backbone",
            "nobody-spladekit/no-such-model",
            "--train-data",
            w["beir"],
            "--triplets",
            w["triplets"],
            "--steps",
            "1",
            "--output",
            t / "OUT",
        ],
        "not in the Hugging Face cache",
    ),
    (
        "quickstart-unknown-data-id",
        lambda t, w: [
            "quickstart",
            "--backbone",
            w["model"],
            "--train-data",
            "nobody/no-such-data",
            "--triplets",
            w["triplets"],
            "--steps",
            "1",
            "--output",
            t / "OUT",
        ],
        "not a folder, a suite or an ir_datasets id",
    ),
    (
        "quickstart-unknown-eval-data-id",
        lambda t, w: [
            "quickstart",
            "--backbone",
            w["model"],
            "--train-data",
            w["beir"],
            "--eval-data",
            "nobody/no-such-data",
            "--triplets",
            w["triplets"],
            "--steps",
            "1",
            "--output",
            t / "OUT",
        ],
        "'nobody/no-such-data' is not a folder, a suite or an ir_datasets id",
    ),
    # fidelity
    (
        "fidelity-unknown-target",
        lambda t, w: ["fidelity", w["model"], "--data", w["beir"], "--target", "int4", "--json-out", t / "OUT.json"],
        "unknown fidelity target int4",
    ),
    (
        "fidelity-suite",
        lambda t, w: ["fidelity", w["model"], "--data", "beir13", "--json-out", t / "OUT.json"],
        "is a suite",
    ),
    (
        "fidelity-missing-data",
        lambda t, w: ["fidelity", w["model"], "--data", t / "nope", "--json-out", t / "OUT.json"],
        "nope: no such collection folder",
    ),
    (
        "fidelity-negative-tolerance",
        lambda t, w: ["fidelity", w["model"], "--data", w["beir"], "--tolerance", "-1", "--json-out", t / "OUT.json"],
        "tolerance must be a finite number >= 0, got -1",
    ),
    # tune-index
    (
        "tune-index-unknown-parameter",
        lambda t, w: ["tune-index", w["vectors"], "--query-vectors", w["vectors"], "--grid", "cut=1", "-o", t / "OUT"],
        "seismic does not take cut",
    ),
    (
        "tune-index-bad-value",
        lambda t, w: [
            "tune-index",
            w["vectors"],
            "--query-vectors",
            w["vectors"],
            "--grid",
            "heap_factor=-1",
            "-o",
            t / "OUT",
        ],
        "seismic parameter heap_factor=-1",
    ),
    (
        "tune-index-target-above-one",
        lambda t, w: [
            "tune-index",
            w["vectors"],
            "--query-vectors",
            w["vectors"],
            "--recall-target",
            "1.5",
            "-o",
            t / "OUT",
        ],
        "must be in (0, 1]",
    ),
    (
        "tune-index-no-default-grid",
        lambda t, w: [
            "tune-index",
            w["vectors"],
            "--query-vectors",
            w["vectors"],
            "--backend",
            "exact",
            "-o",
            t / "OUT",
        ],
        "no default grid for exact",
    ),
    (  # today: recall 1.0000 at every target, and an index built with the "fastest" configuration
        "tune-index-no-queries",
        lambda t, w: ["tune-index", w["vectors"], "--query-vectors", empty_vectors(t, w), "-o", t / "OUT"],
        "no query vectors: recall@k needs queries",
    ),
    (
        "tune-index-queries-not-vectors",
        lambda t, w: ["tune-index", w["vectors"], "--query-vectors", w["beir"], "-o", t / "OUT"],
        "not a spladekit vectors folder",
    ),
]


def run_cli(arguments: list, capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["spladekit", *map(str, arguments)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments, expected", [pytest.param(build, expected, id=name) for name, build, expected in CASES]
)
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(
    arguments, expected, world, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    from huggingface_hub import constants  # read on each use: HF_HUB_OFFLINE=1 and an empty cache, in process

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # no case may wait on the network
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache" / "hf"))
    before = {path for path in tmp_path.rglob("*")}
    code, err = run_cli(arguments(tmp_path, world), capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]  # progress bars are not errors
    assert code == 2, err
    assert "Traceback" not in err
    assert len([line for line in lines if line.startswith("error: ")]) == 1, err
    assert max(map(len, lines)) < 600, f"an error line of {max(map(len, lines))} characters"
    assert expected in err
    created = {
        path for path in tmp_path.rglob("*") if path not in before and not path.is_relative_to(tmp_path / "cache")
    }
    assert not [path for path in created if "OUT" in path.name or path.name.startswith(".OUT")], created


def test_the_matrix_covers_every_command():
    from spladekit.cli import app

    commands = {command.name or command.callback.__name__ for command in app.registered_commands}
    commands |= {group.name for group in app.registered_groups}  # export: one sub-command per format
    covered = {command for command in commands if any(name.startswith(f"{command}-") for name, _, _ in CASES)}
    assert commands == covered, commands - covered
    assert all(any(name.startswith(f"{command}-") for command in commands) for name, _, _ in CASES)
