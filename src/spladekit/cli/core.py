"""diagnose, rescale, encode: the backbone → vectors half of the pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from spladekit.cli.app import app, emit, opened, write_json
from spladekit.cli.options import (
    BF16,
    COMPILE,
    DEVICE,
    JSON_FLAG,
    JSON_OUTPUT,
    OVERWRITE_FILE,
    PRECISION,
    TRUST_REMOTE_CODE,
    doc_max_length_option,
    max_active_dims_option,
    option,
    query_max_length_option,
)
from spladekit.common.schema import MIN_TOKEN_LIMIT
from spladekit.vectors.shards import DEFAULT_SHARD_SIZE

if TYPE_CHECKING:
    from spladekit.model.diagnosis import HeadReport


def chosen_precision(precision: str, bf16: bool) -> str:
    """``--precision`` checked (one error line for a bad value), with the deprecated ``--bf16`` mapped onto it
    (a one-line notice on stderr; ``--bf16`` with another ``--precision`` than bf16/fp32 is refused)."""
    import sys

    from spladekit.common.devices import BF16 as BF16_PRECISION
    from spladekit.common.devices import FP32, check_precision
    from spladekit.common.errors import SpladekitError

    check_precision(precision)
    if not bf16:
        return precision
    if precision not in (FP32, BF16_PRECISION):
        raise SpladekitError(f"--bf16 means --precision bf16, which contradicts --precision {precision}: give one")
    print("notice: --bf16 is deprecated, use --precision bf16 (the same encoding)", file=sys.stderr)
    return BF16_PRECISION


def side_max_length(side: str, doc_max_length: int | None, query_max_length: int | None) -> int | None:
    """The token limit of ``--side``: ``--query-max-length`` for queries, ``--doc-max-length`` for documents; the
    other side's option is refused in one line (it would be silently ignored)."""
    from spladekit.common.errors import SpladekitError

    if side == "query" and doc_max_length is not None:
        raise SpladekitError("--doc-max-length is for documents: with --side query give --query-max-length")
    if side != "query" and query_max_length is not None:
        raise SpladekitError(f"--query-max-length is for queries: with --side {side} give --doc-max-length")
    return query_max_length if side == "query" else doc_max_length


def checked_device(name: str) -> str:
    """``--device`` checked before any work (:func:`spladekit.common.devices.resolve_device`), as given."""
    from spladekit.common.devices import resolve_device

    resolve_device(name)
    return name


def _report_text(report: HeadReport) -> str:
    from spladekit.model.diagnosis import collapse_advice

    lines = [
        f"architecture      {report.architecture} ({report.model_type})",
        f"head              {report.head_param}  [{report.vocab_size} x {report.hidden_size}]  tied={report.tied}",
        f"norms             frobenius {report.frobenius_norm:.2f}  row mean {report.mean_row_norm:.3f}  "
        f"row max {report.max_row_norm:.3f}",
        "bias              none"
        if report.bias_mean is None
        else f"bias              mean {report.bias_mean:.3f}  std {report.bias_std:.3f}",
        f"initial vectors   q nnz {report.avg_q_nnz:.1f}  d nnz {report.avg_d_nnz:.1f}  "
        f"term weight mean {report.mean_term_weight:.3f} max {report.max_term_weight:.3f}",
        f"initial scores    median pair {report.median_pair_score:.2f}  mean q x d {report.mean_score:.2f}",
        f"collapse check    weight std {report.term_weight_std or 0:.3f}  mean cosine between texts "
        f"{report.mean_cosine or 0:.3f}: "
        + (f"{report.collapse}; {collapse_advice(report)}" if report.collapse else "no collapse before training"),
        f"pair score by k   {report.scores_by_k}",
        f"recommended k     {report.recommended_k:g}  mode {report.recommended_mode}"
        + (
            ""
            if report.word_position_ratio is None
            else f"  (word/position embedding norm {report.word_position_ratio:.2f}; "
            "tied divides it by k, untie below 1)"
        ),
    ]
    if report.rescale:
        lines.append(f"already rescaled  {report.rescale} (recommended k is relative to this)")
    if report.fresh_keys:
        lines.append(f"fresh (random)    {', '.join(report.fresh_keys)}")
    return "\n".join(lines)


@app.command()
def diagnose(
    backbone: str = typer.Argument(..., help="Hub id or local folder of a masked-LM model."),
    sample: Optional[Path] = typer.Option(
        None,
        help="Triplets/pairs TSV (query<TAB>document[<TAB>…]) for the initial SPLADE statistics; "
        "default: 12 built-in English query–document pairs.",
    ),
    sample_size: int = typer.Option(64, min=1, help="How many pairs of --sample to use."),
    max_length: int = option(
        256,
        "--doc-max-length",
        min=MIN_TOKEN_LIMIT,
        detail="Both texts of each sample pair are encoded at this limit, as training's auto-k diagnosis does at "
        "data.doc_max_length.",
    ),
    mode: str = option(
        "auto",
        "--mode",
        detail="Here: the mode each candidate k of auto-k is scored under (auto: tied, then untie when the "
        "recommended mode for that k is untie).",
    ),
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
    output: Optional[Path] = JSON_OUTPUT,
    overwrite: bool = OVERWRITE_FILE,
) -> None:
    """Measure the vocabulary projection (norms, tying, bias) and the SPLADE vectors it gives untrained."""
    from spladekit.data import read_triplets
    from spladekit.data.samples import SAMPLE_PAIRS
    from spladekit.model.diagnosis import diagnose as diagnose_head
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.head import parse_mode

    parse_mode(mode, allow_auto=True)
    with opened(output, folder=False, overwrite=overwrite) as staged:
        pairs: Sequence[tuple[str, str]] = SAMPLE_PAIRS
        if sample is not None:
            pairs = [(t.query, t.positive) for t in read_triplets(sample, limit=sample_size, min_negatives=0)]
        encoder = SparseEncoder.from_pretrained(backbone, trust_remote_code=trust_remote_code)
        report = diagnose_head(encoder, pairs, max_length=max_length, mode=mode)
        write_json(staged, report.to_dict())
    emit(report.to_dict(), as_json, None, _report_text(report))


@app.command()
def rescale(
    backbone: str = typer.Argument(..., help="Hub id or local folder of a masked-LM model."),
    k: str = typer.Option(
        ...,
        "--k",
        help="Divide the vocabulary projection by k (a positive finite number), "
        "or 'auto': the recommended k of `spladekit diagnose` (built-in sample pairs).",
    ),
    mode: str = option(
        "tied", "--mode", detail="Input embeddings are untouched under untie (see `spladekit diagnose`)."
    ),
    rescale_bias: bool = typer.Option(False, "--rescale-bias", help="Divide the projection bias by k too."),
    output: Path = option(..., "--output", "-o", detail="Here: the rescaled model's folder."),
    overwrite: bool = option(False, "--overwrite"),
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Rescale the MLM head once (W_head ← W_head / k) and save a model folder that records it."""
    from spladekit.model.head import head_norms, parse_k
    from spladekit.model.inference_free import document_encoder
    from spladekit.model.loading import load_model
    from spladekit.model.rescaling import apply_rescale, resolve_rescale

    parse_k(k, allow_auto=True)  # a bad k fails before the model is loaded
    with opened(output, folder=True, overwrite=overwrite) as staged:
        model = load_model(backbone, trust_remote_code=trust_remote_code)
        # an inference-free model's head is its document encoder's; the query table is saved with it
        encoder = document_encoder(model)
        record = resolve_rescale(encoder, k, mode, rescale_bias)
        before = head_norms(encoder.model)
        after = head_norms(apply_rescale(encoder, record).model)
        model.save(staged)
    payload = {
        "backbone": backbone,
        "k": record.k,
        "mode": record.mode,
        "rescale_bias": rescale_bias,
        "auto": list(record.auto),
        "output": str(output),
        "before": before,
        "after": after,
    }
    emit(
        payload,
        as_json,
        None,
        f"head frobenius norm {before['frobenius_norm']:.3f} -> {after['frobenius_norm']:.3f} "
        f"({record.describe()}); saved to {output}",
    )


@app.command()
def encode(
    model: str = typer.Argument(..., help="Hub id or folder of a model (spladekit, or any masked-LM)."),
    corpus: str = option(
        ...,
        "--corpus",
        detail='The texts: a JSONL file (one {"_id", "text", "title"?} object per '
        "line), a BEIR folder (its corpus.jsonl), a Hugging Face parquet folder or dataset id "
        "(corpus config), or an ir_datasets id (its documents). Read lazily, twice: a "
        "validating pass, then the encoding.",
    ),
    output: Path = option(
        ...,
        "--output",
        "-o",
        detail="Here: a sharded vectors folder: shards/NNNNN/ (vectors.npz CSR float32, ids.json, a shard.json "
        "sidecar with sha256, rows, nnz) and manifest.json, written last, when every shard is complete.",
    ),
    shard_size: int = typer.Option(
        DEFAULT_SHARD_SIZE,
        "--shard-size",
        help="Documents per shard (>= 1): the unit of memory "
        "(one shard's texts and vectors are held at a time), of --resume and of "
        "--shard/torchrun parallelism.",
    ),
    resume: bool = option(
        False,
        "--resume",
        detail="Here: keep the complete shards whose checksums and plan (model weights, corpus, options, shard "
        "size) match, encode the missing or damaged ones.",
    ),
    shard: Optional[str] = option(
        None,
        "--shard",
        metavar="I/N",
        detail="Here: only shards j with j % N == I (0 <= I < N) into the shared --output; the process that "
        "completes the last shard writes the manifest. Under torchrun the ranks split the shards the same way "
        "(RANK/WORLD_SIZE).",
    ),
    batch_size: int = option(32, "--batch-size", min=1),
    side: str = option("document", "--side", detail="Default: document."),
    doc_max_length: Optional[int] = doc_max_length_option(),
    query_max_length: Optional[int] = query_max_length_option(
        detail="With --side query (default: the model's query limit, else its document limit)."
    ),
    max_active_dims: Optional[int] = max_active_dims_option("encoded"),
    overwrite: bool = option(False, "--overwrite", detail="Single process only, not with --resume."),
    pooling: str = option("auto", "--pooling", detail="fused-adaptive: as fused when encoding."),
    trust_remote_code: bool = TRUST_REMOTE_CODE,
    device: str = DEVICE,
    precision: str = PRECISION,
    bf16: bool = BF16,
    compiled: bool = COMPILE,
    as_json: bool = JSON_FLAG,
) -> None:
    """Encode a corpus (documents, or queries with --side query) into a sharded SPLADE vectors folder.

    Streaming: memory holds one shard, not the corpus. Resumable (--resume) and data-parallel: --shard I/N,
    or `torchrun --nproc-per-node N -m spladekit encode …` (one GPU per rank when present)."""
    from spladekit.vectors.encoding import encode_to_shards

    max_length = side_max_length(side, doc_max_length, query_max_length)
    result = encode_to_shards(
        model,
        corpus,
        output,
        shard_size=shard_size,
        resume=resume,
        overwrite=overwrite,
        shard=shard,
        batch_size=batch_size,
        side=side,
        max_length=max_length,
        max_active_dims=max_active_dims,
        pooling=pooling,
        trust_remote_code=trust_remote_code,
        device=device,
        compiled=compiled,
        precision=chosen_precision(precision, bf16),
    )
    meta = {} if result.manifest is None else result.manifest["meta"]
    payload = {
        **meta,
        "output": str(output),
        "complete": result.manifest is not None,
        "shards": result.shards,
        "documents": result.documents,
        "encoded_shards": result.encoded,
        "reused_shards": result.reused,
        "seconds": result.seconds,
    }
    done = (
        f"complete: {meta['documents']} texts, avg nnz {meta['avg_nnz']:.1f}"
        if result.manifest is not None
        else "not complete yet: the process that seals the last shard (under torchrun: rank 0) writes manifest.json"
    )
    emit(
        payload,
        as_json,
        None,
        f"encoded {len(result.encoded)} of {result.shards} shards, reused "
        f"{len(result.reused)} in {result.seconds:.1f}s; {done} -> {output}",
    )
