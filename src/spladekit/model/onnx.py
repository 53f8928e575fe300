"""SPLADE models as one ONNX graph, and an encoder that runs them through onnxruntime.

:func:`export_onnx` traces backbone + MLM head + SPLADE pooling, ``w_v = max_t log(1 + relu(logit_{t,v}))`` over
the unmasked tokens (Formal et al., SPLADE v2, arXiv 2109.10086), into ``model.onnx`` (inputs ``input_ids``,
``attention_mask``: batch × sequence, both dynamic; output ``weights``: batch × V, or with ``top_k`` the ``K``
largest as ``indices``/``values``, batch × K), with the tokenizer and ``onnx.json`` (what the graph computes,
its token limits, the largest difference from torch measured at export). sentence-transformers' ONNX export stops
at the MLM logits (B × L × V, pooling left to the caller); this graph returns the sparse vector itself.
``quantize="int8"`` applies onnxruntime's dynamic int8 quantization to the graph's weights. An inference-free model
exports its document encoder as the graph and its query side as what it is, the weight table
(``query_weights.safetensors``: a query's vector is ``table[v]`` for each distinct token v).

:class:`OnnxEncoder` encodes with such a folder (CPU, onnxruntime) behind the calls evaluation uses
(``encode_document``, ``encode_query``, ``side_max_length``): ``spladekit.evaluation.evaluate(OnnxEncoder(folder),
collection, cache=False)`` scores the exported graph itself.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import read_json
from spladekit.common.sparse import check_max_active_dims, keep_top_weights
from spladekit.model.backbone import quiet_transformers
from spladekit.model.batches import text_list
from spladekit.model.encoder import Side, SparseEncoder, check_side
from spladekit.model.folding import read_fold
from spladekit.model.head_options import head_options
from spladekit.model.inference_free import (
    QUERY_WEIGHTS_FILE,
    QUERY_WEIGHTS_TENSOR,
    InferenceFreeEncoder,
    document_encoder,
    read_query_weights,
    weight_table_vectors,
)

GRAPH_FILE, ONNX_METADATA = "model.onnx", "onnx.json"
OPSET = 18  # onnxruntime ≥ 1.14 runs it; the torch.export-based exporter's default range
VOCAB_BLOCK = 4096  # vocabulary terms projected at a time inside the graph
PARITY_TEXTS = (
    "what is the capital of france",
    "Paris is the capital and most populous city of France, on the Seine, with 2.1 million residents.",
    "a",
)


def _onnx_packages() -> tuple[Any, Any]:
    try:
        import onnxruntime
        import onnxscript  # noqa: F401  (torch.onnx.export's graph builder)
    except ImportError:
        raise SpladekitError("ONNX needs onnx, onnxscript and onnxruntime: pip install 'spladekit[onnx]'") from None
    return torch.onnx, onnxruntime


class _SpladeGraph(nn.Module):
    """What is traced: token ids and mask → SPLADE weights (or their top k).

    ``log(1 + relu(·))`` is non-decreasing, so the max over tokens of the activations is the activation of the max
    logit: the graph takes the max of the masked logits first and activates B × V numbers, not B × L × V, and it
    projects onto the vocabulary a block of ``VOCAB_BLOCK`` terms at a time (the B × L × V logits at once made the
    graph slower: docs/benchmarks.md). The weights are the same numbers."""

    def __init__(self, encoder: SparseEncoder, top_k: int | None):
        super().__init__()
        self.encoder, self.top_k = encoder, top_k
        options = encoder.head_options
        self.shift, self.position_top_k = float(options.logit_shift), options.position_top_k
        fold = encoder.fold
        if fold is not None:
            # a fold as gathers: dimension d's members (padded with V, a zero column) and a max over them
            classes: list[list[int]] = [[] for _ in range(fold.dimensions)]
            for token, dimension in enumerate(fold.token_map.tolist()):
                classes[dimension].append(token)
            width = max(map(len, classes))
            members = [group + [fold.vocab_size] * (width - len(group)) for group in classes]
            self.register_buffer("members", torch.tensor(members, dtype=torch.long), persistent=False)
        else:
            self.members = None

    def _logits(self, hidden: torch.Tensor, projection: nn.Linear, start: int) -> torch.Tensor:
        logits = hidden @ projection.weight[start : start + VOCAB_BLOCK].T
        if projection.bias is not None:
            logits = logits + projection.bias[start : start + VOCAB_BLOCK]
        return logits - self.shift if self.shift else logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        hidden, projection = self.encoder.head_inputs({"input_ids": input_ids, "attention_mask": attention_mask})
        padding = (attention_mask == 0).unsqueeze(-1)
        vocab = projection.weight.shape[0]
        threshold = None
        if self.position_top_k is not None:
            # each token's K-th largest logit, from each block's K largest; a logit below it is dropped (a tie at
            # the K-th place keeps every tied term here, the lower id alone in torch: equal logits, measure zero)
            tops = []
            for start in range(0, vocab, VOCAB_BLOCK):
                logits = self._logits(hidden, projection, start)
                tops.append(torch.topk(logits, min(self.position_top_k, logits.shape[-1]), dim=-1).values)
            threshold = torch.topk(torch.cat(tops, dim=-1), self.position_top_k, dim=-1).values[..., -1:]
        blocks = []
        for start in range(0, vocab, VOCAB_BLOCK):
            logits = self._logits(hidden, projection, start)
            if threshold is not None:
                logits = logits.masked_fill(logits < threshold, float("-inf"))
            blocks.append(logits.masked_fill(padding, float("-inf")).amax(dim=1))
        weights = torch.log1p(torch.relu(torch.cat(blocks, dim=1)))
        if self.members is not None:
            padded = torch.cat([weights, weights.new_zeros(weights.shape[0], 1)], dim=1)
            weights = padded[:, self.members].amax(dim=2)
        if self.top_k is None:
            return weights
        values, indices = torch.topk(weights, self.top_k, dim=1)
        return indices, values


def export_onnx(
    model: SparseEncoder | InferenceFreeEncoder,
    folder: str | Path,
    top_k: int | None = None,
    quantize: Literal["int8"] | None = None,
) -> dict:
    """Write ``model.onnx``, the tokenizer and ``onnx.json`` (and an inference-free model's query weight table) into
    the (new, empty) ``folder``; returns the metadata, with the largest |difference| between onnxruntime's and
    torch's document weights on three texts."""
    from safetensors.torch import save_file

    folder = Path(folder)
    encoder = document_encoder(model)
    if top_k is not None and not 1 <= top_k <= encoder.vocab_size:
        raise SpladekitError(f"top_k must be between 1 and the vocabulary size {encoder.vocab_size}, got {top_k}")
    onnx, _ = _onnx_packages()
    if isinstance(model, InferenceFreeEncoder):
        table = model.query_weights.detach().float().cpu().contiguous()
        save_file({QUERY_WEIGHTS_TENSOR: table}, str(folder / QUERY_WEIGHTS_FILE))
    encoder = encoder.to("cpu").eval()
    graph = _SpladeGraph(encoder, top_k)
    sample = encoder.tokenize(list(PARITY_TEXTS))
    inputs = (sample["input_ids"], sample["attention_mask"])
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    outputs = ["weights"] if top_k is None else ["indices", "values"]
    started = time.perf_counter()
    with quiet_transformers(), torch.no_grad():
        onnx.export(
            graph,
            inputs,
            str(folder / GRAPH_FILE),
            input_names=["input_ids", "attention_mask"],
            output_names=outputs,
            dynamic_shapes=({0: batch, 1: sequence}, {0: batch, 1: sequence}),
            opset_version=OPSET,
            dynamo=True,
            external_data=False,  # one file (protobuf's limit, 2 GB, holds a large-size BERT)
            verbose=False,
        )
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        float_graph = folder / "model.float32.onnx"
        (folder / GRAPH_FILE).rename(float_graph)
        quantize_dynamic(str(float_graph), str(folder / GRAPH_FILE), weight_type=QuantType.QInt8)
        float_graph.unlink()
    encoder.tokenizer.save_pretrained(folder)
    if encoder.fold is not None:  # the dimensions' token strings, and an inference-free model's query ids → dimensions
        encoder.fold.save(folder)
    metadata = {
        "format": "spladekit-onnx",
        "version": 1,
        "head": encoder.head_options.to_dict(),  # in the graph; lowercase: done by OnnxEncoder before tokenizing
        "kind": "inference-free" if isinstance(model, InferenceFreeEncoder) else "splade",
        "outputs": outputs,
        "top_k": top_k,
        "quantized": quantize,
        "opset": OPSET,
        "vocab_size": encoder.vocab_size,
        "max_length": encoder.max_length,
        "query_max_length": model.query_max_length,
        "export_seconds": round(time.perf_counter() - started, 1),
    }
    (folder / ONNX_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    exported = OnnxEncoder(folder)
    ours = exported.encode(list(PARITY_TEXTS), show_progress=False).toarray()
    theirs = encoder.encode(list(PARITY_TEXTS), show_progress=False).toarray()
    if top_k is not None:  # compare the top k torch keeps
        theirs = keep_top_weights(sp.csr_matrix(theirs), top_k).toarray()
    metadata["max_abs_diff_vs_torch"] = float(np.abs(ours - theirs).max())
    (folder / ONNX_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


class OnnxEncoder:
    """Encode texts with an exported SPLADE graph through onnxruntime (length-sorted batches, CSR rows in order)."""

    bf16 = False  # onnxruntime runs the graph as exported: fp32, or int8 (precision)

    def __init__(self, folder: str | Path, threads: int = 0):
        from transformers import AutoTokenizer

        _, runtime = _onnx_packages()
        self.folder = Path(folder)
        metadata = read_json(self.folder / ONNX_METADATA, dict)
        if metadata.get("format") != "spladekit-onnx":
            raise InputError(
                "not a spladekit ONNX folder (format is not 'spladekit-onnx')", self.folder / ONNX_METADATA
            )
        self.metadata = metadata
        self.vocab_size, self.max_length = int(metadata["vocab_size"]), int(metadata["max_length"])
        self.query_max_length = metadata.get("query_max_length")
        self.pooling = "onnx" + ("-int8" if metadata.get("quantized") == "int8" else "")
        self.precision = "int8" if metadata.get("quantized") == "int8" else "fp32"
        options = runtime.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = runtime.InferenceSession(
            str(self.folder / GRAPH_FILE), options, providers=["CPUExecutionProvider"]
        )
        with quiet_transformers():
            self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.head_options = head_options(metadata.get("head"), self.folder / ONNX_METADATA)
        self.fold = read_fold(self.folder) if self.head_options.vocab_fold != "none" else None
        self.query_table = None  # inference-free: queries are looked up, not encoded
        if metadata.get("kind") == "inference-free":
            self.query_table = read_query_weights(self.folder / QUERY_WEIGHTS_FILE, self.vocab_size).numpy()

    def prepare_texts(self, texts: Sequence[str]) -> list[str]:
        """The texts as the tokenizer sees them: lowercased under ``head.lowercase``."""
        return self.head_options.prepare_texts(texts)

    def side_max_length(self, side: Side, max_length: int | None = None) -> int:
        check_side(side)
        if max_length is not None:
            return max_length
        return (self.query_max_length or self.max_length) if side == "query" else self.max_length

    def _rows(self, texts: list[str], max_length: int) -> sp.csr_matrix:
        batch = self.tokenizer(
            self.prepare_texts(texts), padding=True, truncation=True, max_length=max_length, return_tensors="np"
        )
        feeds = {"input_ids": batch["input_ids"].astype(np.int64)}
        feeds["attention_mask"] = batch["attention_mask"].astype(np.int64)
        outputs = self.session.run(None, feeds)
        if self.metadata["top_k"] is None:
            return sp.csr_matrix(outputs[0])
        indices, values = outputs
        rows = np.repeat(np.arange(len(texts)), indices.shape[1])
        matrix = sp.csr_matrix((values.ravel(), (rows, indices.ravel())), shape=(len(texts), self.vocab_size))
        matrix.eliminate_zeros()
        return matrix

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
    ) -> sp.csr_matrix:
        """Float32 CSR rows in input order (``max_length``: the document side's limit by default)."""
        from tqdm.auto import tqdm

        texts = text_list(texts)
        if batch_size < 1:
            raise SpladekitError(f"batch_size must be >= 1, got {batch_size}")
        limit = self.side_max_length("document", max_length)
        prepared = self.prepare_texts(texts)
        lengths = [len(ids) for ids in self.tokenizer(prepared, truncation=True, max_length=limit)["input_ids"]]
        order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
        blocks = [sp.csr_matrix((0, self.vocab_size), dtype=np.float32)]
        with tqdm(total=len(texts), desc="encoding (onnx)", unit="text", disable=not show_progress, leave=False) as bar:
            for start in range(0, len(texts), batch_size):
                chunk = order[start : start + batch_size]
                blocks.append(self._rows([texts[i] for i in chunk], limit))
                bar.update(len(chunk))
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        result = sp.vstack(blocks, format="csr")[inverse] if len(texts) else blocks[0]
        result.sort_indices()
        return result.astype(np.float32)

    def _encode_side(
        self,
        side: Side,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        max_active_dims: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """``side``'s vectors (at its token limit unless ``max_length``), pruned to ``max_active_dims``."""
        check_max_active_dims(max_active_dims)
        limit = self.side_max_length(side, max_length)
        if side == "query" and self.query_table is not None:
            token_map = None if self.fold is None else self.fold.token_map
            prepared = self.prepare_texts(text_list(texts))
            vectors = weight_table_vectors(
                self.tokenizer, prepared, self.query_table, limit, batch_size, show_progress, token_map
            )
        else:
            vectors = self.encode(texts, batch_size, limit, show_progress)
        return vectors if max_active_dims is None else keep_top_weights(vectors, max_active_dims)

    encode_document = functools.partialmethod(_encode_side, "document")
    encode_query = functools.partialmethod(_encode_side, "query")
