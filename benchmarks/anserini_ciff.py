"""Does the CIFF file ``spladekit export ciff`` writes hold what Anserini indexes? One run, two routes into
Lucene, compared hit for hit:

1. ``--backend anserini``: the vectors folder, quantized at the scale, indexed by Anserini (term = vocabulary id);
2. the CIFF file exported from the same folder at the same scale, read back with ciff-toolkit's reader, its postings
   written as Anserini's ``JsonVectorCollection`` (term = the CIFF's token string, tf = the CIFF's impact) and indexed
   by Anserini's own ``IndexCollection``; queries as token strings, each repeated by its integer impact.

Anserini 1.7.1 has no CIFF importer of its own (no class of its fat jar reads CIFF), hence the ciff-toolkit reader in
route 2. Equal runs mean that the CIFF's terms, documents and impacts are the ones route 1 indexed.

    python benchmarks/anserini_ciff.py --vectors VECTORS --queries QUERY_VECTORS [--model MODEL] [--k 1000] \\
        --json anserini-ciff.json

Route 2 holds the collection's postings in memory (a check, for collections the size of SciFact).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from spladekit.common.sparse import quantize
from spladekit.export.ciff import export_ciff
from spladekit.export.search_engine import vocabulary_tokens
from spladekit.index.anserini import ROW_NAME, AnseriniSearcher, query_line, run_anserini
from spladekit.vectors.artifact import Vectors


def ciff_as_json_vectors(ciff: Path, output: Path) -> int:
    """The CIFF's postings as one JsonVectorCollection file (``id`` = ROW_NAME of the CIFF docid); returns the number
    of documents with postings."""
    from ciff_toolkit.read import CiffReader

    documents: dict[int, dict[str, int]] = defaultdict(dict)
    with CiffReader(ciff) as reader:
        for postings in reader.read_postings_lists():
            docid = 0
            for posting in postings.postings:
                docid += posting.docid  # gaps
                documents[docid][postings.term] = posting.tf
    with output.open("w", encoding="utf-8") as handle:
        for docid in sorted(documents):
            handle.write(json.dumps({"id": ROW_NAME.format(docid), "contents": "", "vector": documents[docid]}) + "\n")
    return len(documents)


def search_ciff_index(index: Path, queries: Vectors, tokens: list[str], scale: float, k: int, scratch: Path) -> dict:
    """Anserini's SearchCollection over route 2's index: query row -> [(document row, integer score)]."""
    impacts = quantize(queries.matrix, scale, dtype=np.int64)
    names = np.array(tokens, dtype=object)
    topics = scratch / "topics.tsv"
    with topics.open("w", encoding="utf-8") as handle:
        for row in range(impacts.shape[0]):
            low, high = impacts.indptr[row], impacts.indptr[row + 1]
            if high > low:
                handle.write(query_line(row, names[impacts.indices[low:high]], impacts.data[low:high]))
    run = scratch / "ciff-run.trec"
    run_anserini(
        "io.anserini.search.SearchCollection",
        *("-index", index, "-topics", topics, "-topicReader", "TsvInt", "-output", run),
        *("-impact", "-pretokenized", "-hits", k),
    )
    hits: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for line in run.read_text(encoding="utf-8").splitlines():
        qid, _, docid, _, score, _ = line.split()
        hits[int(qid)].append((int(docid), round(float(score))))
    return hits


def compare(vectors: Path, queries_folder: Path, tokens: list[str], scale: float, k: int, scratch: Path) -> dict:
    """Route 1 against route 2 (see the module) for the vectors folder and its queries, terms named ``tokens``."""
    queries = Vectors.load(queries_folder)
    ciff = scratch / "collection.ciff"
    export_ciff(vectors, ciff, tokens=tokens, scale=scale, show_progress=False)
    with AnseriniSearcher.build_from_blocks((block.matrix for block in Vectors.blocks(vectors)), scale=scale) as direct:
        result = direct.search(queries.matrix, k=k)
    collection = scratch / "ciff-collection"
    collection.mkdir()
    indexed = ciff_as_json_vectors(ciff, collection / "documents.jsonl")
    index = scratch / "ciff-index"
    run_anserini(
        "io.anserini.index.IndexCollection",
        *("-collection", "JsonVectorCollection", "-generator", "DefaultLuceneDocumentGenerator"),
        *("-input", collection, "-index", index, "-impact", "-pretokenized", "-optimize", "-threads", 1),
    )
    via_ciff = search_ciff_index(index, queries, tokens, scale, k, scratch)
    equal = hits = 0
    for row in range(result.doc_indices.shape[0]):
        kept = result.doc_indices[row] >= 0
        direct_hits = list(
            zip(result.doc_indices[row][kept].tolist(), np.rint(result.scores[row][kept] * scale**2).astype(int))
        )
        equal += direct_hits == via_ciff.get(row, [])
        hits += len(direct_hits)
    return {
        "queries": result.doc_indices.shape[0],
        "runs_equal_hit_for_hit": equal,
        "hits": hits,
        "documents_in_ciff": indexed,
        "scale": scale,
        "k": k,
        "ciff_bytes": ciff.stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=Path, required=True, help="document vectors folder")
    parser.add_argument("--queries", type=Path, required=True, help="query vectors folder")
    parser.add_argument("--model", help="tokenizer for the CIFF's terms (default: the one meta.json names)")
    parser.add_argument("--scale", type=float, default=100.0)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    first = next(iter(Vectors.blocks(args.vectors)))
    tokens = vocabulary_tokens(args.model or first.meta["model"], first.vocab_size)
    with tempfile.TemporaryDirectory(prefix="anserini-ciff-") as scratch:
        report = compare(args.vectors, args.queries, tokens, args.scale, args.k, Path(scratch))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report | {"args": vars(args)}, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
