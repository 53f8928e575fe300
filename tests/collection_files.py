"""Write small test collections in the BEIR folder layout and the Hugging Face parquet layout."""

from __future__ import annotations

import json
from pathlib import Path

DOCS = {
    "d1": ("Paris", "paris is the capital city of france"),
    "d2": ("", "the seine river flows through paris"),
    "d3": ("Vaccines", "a vaccine trains the immune system against a virus"),
    "d4": ("", "vitamin d helps bone health and muscle pain"),
    "d5": ("", "water boils at lower temperature under low pressure"),
    "d6": ("Python", "a python list is a data model for sequences"),
    "d7": ("", "light speed is the same for every observer"),
    "d8": ("", "plants turn light water and oxygen into glucose"),
}
QUERIES = {
    "q1": "what is the capital of france",
    "q2": "how does a vaccine train the immune system",
    "q3": "why does water boil under pressure",
    "q4": "what river flows through paris",
    "q5": "an unjudged query about cats",
}
QRELS = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 1}, "q3": {"d5": 2}, "q4": {"d2": 1, "d1": 1}}


def write_beir(folder: Path, docs=DOCS, queries=QUERIES, qrels=QRELS, split: str = "test") -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w") as stream:
        for doc_id, (title, text) in docs.items():
            stream.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as stream:
        for query_id, text in queries.items():
            stream.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    with (folder / "qrels" / f"{split}.tsv").open("w") as stream:
        stream.write("query-id\tcorpus-id\tscore\n")
        for query_id, judged in qrels.items():
            for doc_id, relevance in judged.items():
                stream.write(f"{query_id}\t{doc_id}\t{relevance}\n")
    return folder


def write_hf_parquet(folder: Path, qrels_columns: dict, docs=DOCS, queries=QUERIES) -> Path:
    """``<folder>/{corpus,queries,qrels}/train-00000-of-00001.parquet``, as in a downloaded NanoBEIR repo."""
    from datasets import Dataset

    rows = {
        "corpus": {"_id": list(docs), "text": [text for _, text in docs.values()]},
        "queries": {"_id": list(queries), "text": list(queries.values())},
        "qrels": qrels_columns,
    }
    for config, columns in rows.items():
        (folder / config).mkdir(parents=True)
        Dataset.from_dict(columns).to_parquet(str(folder / config / "train-00000-of-00001.parquet"))
    return folder
