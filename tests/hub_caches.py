"""Library caches built from local copies, so that the hub / ir_datasets code paths run without a network.

* :func:`hf_cache`: a Hugging Face hub cache (``HF_HUB_CACHE``) holding a model folder under a repo id, in
  the hub's own layout: ``models--ORG--NAME/blobs/<sha256>``, ``snapshots/<revision>/<file>`` (links to the
  blobs), ``refs/main`` (the revision). With ``HF_HUB_OFFLINE=1`` transformers resolves the id from it.
* :func:`ir_datasets_home`: an ``IR_DATASETS_HOME`` holding BEIR SciFact where ir_datasets' beir handler
  looks for its download (``beir/scifact/source.zip``, members ``scifact/corpus.jsonl``,
  ``scifact/queries.jsonl``, ``scifact/qrels/{train,test}.tsv``). ir_datasets checks the md5 of a file only
  while downloading it; an existing ``source.zip`` is used as is, and its ``docs.pklz4`` store is built
  from it on first use.
* :func:`ir_datasets_cranfield`: the same home holding Cranfield as ``cranfield``, in the Glasgow distribution
  ir_datasets downloads (``cranfield/cran.tar.gz``: ``cran.all.1400``, ``cran.qry``, ``cranqrel``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import spladekit

REVISION = "0" * 40  # a commit hash: any 40 hex digits


def hf_cache(model_folder: Path, repo_id: str, cache: Path) -> Path:
    """``cache`` (an ``HF_HUB_CACHE``) holding ``model_folder``'s files as ``repo_id`` at :data:`REVISION`."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for source in sorted(model_folder.iterdir()):
        if not source.is_file():
            continue
        data = source.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / source.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return cache


def ir_datasets_home(beir_folder: Path, home: Path, extra_docs: int = 50) -> Path:
    """``home`` (an ``IR_DATASETS_HOME``) holding BEIR SciFact from ``beir_folder``, as ``beir/scifact``.

    To keep tests fast the corpus is cut to the documents judged in any split plus the first
    ``extra_docs`` others; queries and qrels are complete."""
    judged = set()
    qrels = {}
    for split in ("train", "test"):
        text = (beir_folder / "qrels" / f"{split}.tsv").read_text()
        qrels[split] = text
        judged |= {line.split("\t")[1] for line in text.splitlines()[1:] if line.strip()}
    kept = []
    others = 0
    with (beir_folder / "corpus.jsonl").open() as lines:
        for line in lines:
            doc_id = json.loads(line)["_id"]
            if doc_id in judged or others < extra_docs:
                others += doc_id not in judged
                kept.append(line)
    target = home / "beir" / "scifact"
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target / "source.zip", "w") as archive:
        archive.writestr("scifact/corpus.jsonl", "".join(kept))
        archive.writestr("scifact/queries.jsonl", (beir_folder / "queries.jsonl").read_text())
        for split, text in qrels.items():
            archive.writestr(f"scifact/qrels/{split}.tsv", text)
    return home


def ir_datasets_cranfield(beir_folder: Path, home: Path) -> Path:
    """``home`` (an ``IR_DATASETS_HOME``) holding the Cranfield collection of ``beir_folder`` (the BEIR copy in
    ``shared``) as ir_datasets' ``cranfield``: the Glasgow files rebuilt from it, whole. The copy wrote the
    "no interest" grade -1 as 0; the original's -1 is written back. Query numbers are the file order, as
    ir_datasets and the copy both number them."""
    documents = [json.loads(line) for line in (beir_folder / "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in (beir_folder / "queries.jsonl").read_text().splitlines()]
    qrels = [line.split("\t") for line in (beir_folder / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    members = {
        "cran.all.1400": "".join(
            f".I {doc['_id']}\n.T\n{doc['title']}\n.A\n\n.B\n\n.W\n{doc['text']}\n" for doc in documents
        ),
        "cran.qry": "".join(f".I {query['_id']}\n.W\n{query['text']}\n" for query in queries),
        "cranqrel": "".join(f"{query} {doc} {int(grade) or -1}\n" for query, doc, grade in qrels),
    }
    target = home / "cranfield"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target / "cran.tar.gz", "w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return home


def offline_env(root: Path) -> dict[str, str]:
    """Environment variables for a process that may use only the caches under ``root`` and imports the
    spladekit under test (whatever the child's working directory)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "IR_DATASETS"))}
    return env | {
        "PYTHONPATH": str(Path(spladekit.__file__).resolve().parents[1]),
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "IR_DATASETS_HOME": str(root / "ir_datasets"),
        "SPLADEKIT_CACHE": str(root / "spladekit"),
        "TRANSFORMERS_OFFLINE": "1",
    }
