"""SparseEncoder: a masked-LM backbone that turns texts into SPLADE vectors (scipy CSR, float32)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn
from tqdm.auto import tqdm

from spladekit.common.atomic import atomic_directory
from spladekit.common.devices import autocast
from spladekit.common.errors import SpladekitError
from spladekit.common.schema import MIN_TOKEN_LIMIT
from spladekit.common.sparse import check_max_active_dims, dense_to_csr, keep_top_weights
from spladekit.model.backbone import (
    Backbone,
    MLMHead,
    load_backbone,
    position_limit,
    projection_bypassed,
    quiet_transformers,
)
from spladekit.model.batches import LENGTH_SLICE, in_order, length_groups, smaller_batch, text_list
from spladekit.model.card import CardEvaluation, write_model_card
from spladekit.model.folding import VocabularyFold, build_fold, read_fold
from spladekit.model.head import rescale, rescale_record
from spladekit.model.head_options import HeadOptions, head_options
from spladekit.model.metadata import METADATA_FILE, check_rescale_record, read_metadata
from spladekit.model.packing import block_diagonal_mask, pack, packable, position_offset, unpack
from spladekit.model.pooling import (
    DENSE_BACKWARD_DENSITY,
    reusing_projection,
    splade_max_pool,
    splade_max_pool_auto,
    splade_max_pool_fused,
)

log = logging.getLogger("spladekit")

DEFAULT_MAX_LENGTH = 256
# What a text is encoded as: each side has its own token limit (SparseEncoder.side_max_length).
Side = Literal["query", "document"]
SIDES: tuple[Side, ...] = ("query", "document")


def splade_max_pool_triton(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attention_mask: torch.Tensor,
    position_top_k: int | None = None,
) -> torch.Tensor:
    """The Triton head (:mod:`spladekit.model.triton_head`), imported when first used: triton is optional. Its
    kernels keep one running max per term; with ``position_top_k`` the fused head's running top K per token runs
    instead (torch blocks on the same device: the same values and gradients)."""
    check_pooling("triton", hidden.device)
    if position_top_k is not None:
        return splade_max_pool_fused(hidden, weight, bias, attention_mask, position_top_k=position_top_k)
    from spladekit.model.triton_head import splade_max_pool_triton as pool

    return pool(hidden, weight, bias, attention_mask)


# SPLADE max pooling implementations (same values and gradients; see spladekit.model.pooling). The default, auto, is
# fused screened in bf16 where that is faster (pooling.bf16_screen_pays: CPUs with native bf16), else fused.
DEFAULT_POOLING = "auto"
# Each takes (hidden B × L × H, weight V × H, bias V or None, attention_mask B × L, position_top_k=None) → B × V.
POOLINGS: dict[str, Callable[..., torch.Tensor]] = {
    "auto": splade_max_pool_auto,
    "fused": splade_max_pool_fused,
    "fused-adaptive": functools.partial(splade_max_pool_fused, dense_backward=DENSE_BACKWARD_DENSITY),
    "fused-bf16": functools.partial(splade_max_pool_fused, search_dtype=torch.bfloat16),
    "triton": splade_max_pool_triton,
    "naive": splade_max_pool,
}


def check_pooling(pooling: str, device: torch.device | None = None) -> None:
    """A SpladekitError in one line for a pooling that does not exist, or (with ``device``) cannot run there:
    ``triton`` needs a CUDA device and the triton package (or Triton's interpreter, ``TRITON_INTERPRET=1``)."""
    if pooling not in POOLINGS:
        raise SpladekitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if pooling == "triton" and device is not None:
        from spladekit.model.triton_head import triton_unusable

        reason = triton_unusable(device)
        if reason is not None:
            raise SpladekitError(reason)


def check_side(side: str) -> Side:
    """``side`` as a :data:`Side`, or a SpladekitError naming the choices."""
    for known in SIDES:
        if side == known:
            return known
    raise SpladekitError(f"unknown side {side!r}; choose one of {', '.join(SIDES)}")


def non_finite_weights(module: nn.Module) -> list[str]:
    """Names of the floating-point parameters of ``module`` holding NaN or inf (empty when all are finite).

    Cheap enough to run after every training step (see ``training/loop.py``): one fused max-|w| pass per
    (device, dtype) group (``torch._foreach_norm`` with ord=inf, which propagates NaN, as
    ``clip_grad_norm_`` uses) and one host synchronisation per group, usually one."""
    named = [(name, p) for name, p in module.named_parameters() if p.is_floating_point() and p.numel()]
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.Tensor]]] = {}
    for name, parameter in named:
        groups.setdefault((parameter.device, parameter.dtype), []).append((name, parameter))
    bad = []
    with torch.no_grad():
        for members in groups.values():
            peaks = torch.stack(torch._foreach_norm([p for _, p in members], math.inf))
            finite = torch.isfinite(peaks)
            if not bool(finite.all()):
                bad += [name for (name, _), ok in zip(members, finite.tolist()) if not ok]
    return bad


class NonFiniteVector(SpladekitError):
    """A text encoded to a vector with NaN/inf weights (a broken model): refused, never written."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


class SparseEncoder(nn.Module):
    """SPLADE encoder over any ``AutoModelForMaskedLM``.

    ``forward`` returns differentiable B × V vectors (training); ``encode_query`` / ``encode_document``
    return CSR matrices (inference, length-sorted batches, ``torch.inference_mode``), each side with its own
    token limit: ``max_length`` for documents (and ``encode``), ``query_max_length`` for queries (``None``:
    not recorded, queries use ``max_length`` as they always did). ``pooling`` picks the head:
    ``"auto"`` (default: ``fused-bf16`` on CPUs with native bf16 matmuls, else ``fused``; ``pooling.bf16_screen_pays``),
    ``"fused"`` (chunked projection + max, sparse backward), ``"fused-bf16"`` (a bf16 matmul
    screens the terms under a rounding-error bound, fp32 recomputes the candidates: the same non-zero set,
    see ``bf16_screen.screen_candidates``), ``"fused-adaptive"``, ``"triton"`` or ``"naive"`` (materializes B × L × V
    logits). ``bf16``: ``encode`` runs
    the backbone and head under bf16 autocast (:func:`spladekit.common.devices.autocast`; the weights stay fp32),
    faster where the hardware has bf16 matmuls (docs/benchmarks.md) and not bit-identical to fp32: recorded where the
    vectors are (a sharded folder's plan, the evaluation cache key, an evaluation's provenance).

    ``head``: how logits become a vector beyond the head's weights (:class:`spladekit.model.head_options.HeadOptions`:
    logit shift, per-token top-k, vocabulary fold, lowercasing), applied by every pooling and recorded with the
    model. With a fold, vectors have ``vocab_size`` = the fold's dimensions, named by :meth:`dimension_tokens`.
    """

    def __init__(
        self,
        backbone: Backbone,
        max_length: int | None = None,
        pooling: str = DEFAULT_POOLING,
        query_max_length: int | None = None,
        bf16: bool = False,
        head: HeadOptions | None = None,
        fold: VocabularyFold | None = None,
    ):
        super().__init__()
        check_pooling(pooling)
        self.pooling = pooling
        # fp32, bf16 (autocast) or int8 (set by spladekit.model.loading.quantize_backbone): recorded with the vectors
        self.precision = "bf16" if bf16 else "fp32"
        self.model = backbone.model
        self.tokenizer = backbone.tokenizer
        self.head_options = head_options(head)
        self.head_options.check_vocabulary(self.head.vocab_size)
        if fold is None:
            fold = build_fold(self.tokenizer, self.head.vocab_size, self.head_options.vocab_fold)
            if fold is not None and fold.folded_tokens == 0:
                log.warning("%s: the tokenizer has no such variants, nothing was folded", fold.describe())
            elif fold is not None:
                log.info("%s", fold.describe())
        elif fold.mode != self.head_options.vocab_fold or fold.vocab_size != self.head.vocab_size:
            raise SpladekitError(
                f"the vocabulary fold ({fold.mode}, {fold.vocab_size} ids) does not match head.vocab_fold="
                f"{self.head_options.vocab_fold} on a head of {self.head.vocab_size} ids"
            )
        self.fold = fold
        self.source = backbone.source
        self.original_backbone = backbone.source  # where a saved spladekit model's training started
        self.fresh_keys = list(backbone.fresh_keys)
        self.positions = position_limit(self.model)
        self._clamped: set[int] = set()  # token limits already warned about (one warning per value)
        self._frozen = False  # compile_backbone(frozen=True)
        # None: spladekit's default, not the user's choice, so no warning on a backbone with fewer positions
        default = min(DEFAULT_MAX_LENGTH, self.positions or DEFAULT_MAX_LENGTH)
        self.max_length = default if max_length is None else self.token_limit(max_length)
        self.query_max_length = None if query_max_length is None else self.token_limit(query_max_length)
        accepted = inspect.signature(self.model.forward).parameters
        self._input_names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in accepted]

    @property
    def bf16(self) -> bool:
        """Whether ``encode`` runs under bf16 autocast (``precision`` is bf16)."""
        return self.precision == "bf16"

    # ----------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        rescale_k: float | None = None,
        rescale_mode: str = "tied",
        rescale_bias: bool = False,
        trust_remote_code: bool = False,
        device: str | None = None,
        max_length: int | None = None,
        pooling: str = DEFAULT_POOLING,
        query_max_length: int | None = None,
        bf16: bool = False,
        head: HeadOptions | None = None,
    ) -> SparseEncoder:
        """Load a backbone or a saved spladekit model; optionally rescale its head once (see ``head.rescale``).

        ``pooling`` selects the SPLADE head implementation (see :class:`SparseEncoder`). ``max_length`` (document
        side) and ``query_max_length`` override the token limits the folder records in ``spladekit.json``.
        ``head``: the head options for a backbone (or a saved model whose head is plain); a saved model that records
        other options keeps them (different ones are refused).
        ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``; :func:`spladekit.common.devices.resolve_device`) moves the
        model there; ``None`` leaves it where it loads (the CPU).
        """
        backbone = load_backbone(path_or_id, trust_remote_code=trust_remote_code, device=device)
        metadata = read_metadata(Path(backbone.source))
        check_rescale_record(rescale_record(backbone.model), Path(backbone.source) / "config.json")
        max_length = max_length or metadata.get("max_length") or backbone.settings.get("max_length")
        folder = Path(backbone.source)
        recorded = metadata.get("head")
        options = head_options(head)
        if recorded is not None:
            saved = head_options(recorded, folder / METADATA_FILE)
            if saved.plain and head is not None:  # a plain model (or backbone saved by spladekit) takes options
                saved = options
            if head is not None and options != saved:
                raise SpladekitError(
                    f"{backbone.source} was trained with head options {saved.describe()}; refusing "
                    f"{options.describe()} (load its original backbone to change them)"
                )
            options = saved
        fold = read_fold(folder, MLMHead.of(backbone.model).vocab_size) if options.vocab_fold != "none" else None
        encoder = cls(
            backbone,
            max_length=max_length,
            pooling=pooling,
            query_max_length=query_max_length or metadata.get("query_max_length"),
            bf16=bf16,
            head=options,
            fold=fold,
        )
        encoder.original_backbone = str(metadata.get("backbone") or backbone.source)
        check_pooling(pooling, encoder.device)
        if rescale_k is not None:
            applied = rescale_record(encoder.model)
            wanted = {"k": float(rescale_k), "mode": rescale_mode, "rescale_bias": rescale_bias}
            if applied is None:
                rescale(encoder.model, rescale_k, mode=rescale_mode, rescale_bias=rescale_bias)
            elif applied != wanted:
                raise SpladekitError(
                    f"{backbone.source}: head already rescaled with {applied}; refusing to apply {wanted} on top. "
                    "Load the original backbone to rescale differently."
                )
        return encoder

    def save(
        self,
        directory: str | Path,
        overwrite: bool = False,
        training: dict | None = None,
        evaluation: Sequence[CardEvaluation] = (),
    ) -> Path:
        """Write a standard HF model folder (safetensors) + tokenizer + ``spladekit.json`` + the model card
        (``README.md``, :mod:`spladekit.model.card`: ``training`` = the recipe, ``evaluation`` = results to
        report), atomically.

        An existing folder is replaced only with ``overwrite=True`` (as every command's ``--overwrite``).
        Weights holding NaN or inf are refused (:meth:`check_finite`): nothing is written.
        """
        self.check_finite(f"{directory}: refusing to save")
        with atomic_directory(directory, overwrite=overwrite) as staging:
            self.write_files(staging)
            write_model_card(staging, self, training, evaluation, name=directory)
        return Path(directory)

    def write_files(self, folder: Path) -> None:
        """The model folder's files but the card: weights, tokenizer and ``spladekit.json``."""
        from spladekit.common.version import __version__

        with quiet_transformers():
            self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        metadata = {
            "spladekit_version": __version__,
            "backbone": self.original_backbone,
            "max_length": self.max_length,
            "query_max_length": self.query_max_length,
            "rescale": rescale_record(self.model),
            "pooling": "max log(1 + relu(logits - logit_shift)) over non-padding tokens",
            "head": self.head_options.to_dict(),
        }
        (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
        if self.fold is not None:
            self.fold.save(folder)

    @property
    def card_notes(self) -> tuple[str, ...]:
        """Paragraphs this kind of model adds to its card (none for plain SPLADE)."""
        return ()

    def check_finite(self, action: str) -> None:
        """SpladekitError ``"{action}: …"`` naming the tensors when any weight is NaN or inf."""
        bad = non_finite_weights(self.model)
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            raise SpladekitError(f"{action}: the model's weights hold NaN or inf ({', '.join(bad[:3])}{more})")

    # ----------------------------------------------------------------- properties
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def head(self) -> MLMHead:
        """The masked-LM head (:class:`spladekit.model.backbone.MLMHead`): projection, path, tying."""
        return MLMHead.of(self.model)

    @property
    def vocab_size(self) -> int:
        """The vectors' dimensions: the head's vocabulary, or the fold's dimensions (``head.vocab_fold``)."""
        return self.head.vocab_size if self.fold is None else self.fold.dimensions

    def dimension_tokens(self) -> list[str]:
        """The token string of every vector dimension (``[id:N]`` for ids past the tokenizer; a fold's names)."""
        if self.fold is not None:
            return list(self.fold.dimension_tokens)
        size = self.head.vocab_size
        known = min(size, len(self.tokenizer))
        tokens = list(self.tokenizer.convert_ids_to_tokens(list(range(known))))
        return [token if token is not None else f"[id:{i}]" for i, token in enumerate(tokens)] + [
            f"[id:{i}]" for i in range(known, size)
        ]

    def prepare_texts(self, texts: Sequence[str]) -> list[str]:
        """The texts as the tokenizer sees them: lowercased under ``head.lowercase``."""
        return self.head_options.prepare_texts(texts)

    def pool(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        attention_mask: torch.Tensor,
        pooling: str | None = None,
    ) -> torch.Tensor:
        """B × L × H projection inputs and the projection (V × H ``weight``, ``bias``) → B × ``vocab_size`` vectors:
        the pooling (``pooling``, default the encoder's), with the head options (``logit_shift`` as a bias of b − s,
        ``position_top_k`` inside the pooling, ``vocab_fold`` after it)."""
        options = self.head_options
        if options.logit_shift:
            bias = (weight.new_zeros(weight.shape[0]) if bias is None else bias) - float(options.logit_shift)
        pool = POOLINGS[pooling or self.pooling]
        if options.position_top_k is None:
            vectors = pool(hidden, weight, bias, attention_mask)
        else:
            vectors = pool(hidden, weight, bias, attention_mask, position_top_k=options.position_top_k)
        return vectors if self.fold is None else self.fold.dense(vectors)

    # ----------------------------------------------------------------- computation
    def token_limit(self, max_length: int | None = None) -> int:
        """The one rule for a token limit (``max_length``, default the document side's): at least
        ``MIN_TOKEN_LIMIT`` (else a :class:`SpladekitError`); above the backbone's positions
        (:func:`spladekit.model.backbone.position_limit`) it is clamped to them, with one warning per value."""
        value = self.max_length if max_length is None else max_length
        if isinstance(value, bool) or not isinstance(value, int) or value < MIN_TOKEN_LIMIT:
            raise SpladekitError(f"a token limit (max_length) must be an integer >= {MIN_TOKEN_LIMIT}, got {value!r}")
        if self.positions is None or value <= self.positions:
            return value
        if value not in self._clamped:
            self._clamped.add(value)
            log.warning(
                "token limit %d is above the %d positions of %s: texts are cut at %d tokens",
                value,
                self.positions,
                self.source,
                self.positions,
            )
        return self.positions

    def tokenize(self, texts: list[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        batch = self.tokenizer(
            self.prepare_texts(texts),
            padding=True,
            truncation=True,
            max_length=self.token_limit(max_length),
            return_tensors="pt",
        )
        return {name: batch[name].to(self.device) for name in self._input_names if name in batch}

    def compile_backbone(self, frozen: bool = False) -> None:
        """Compile the backbone's forward in place with ``torch.compile`` (``nn.Module.compile``: the weights, their
        names and what ``save`` writes are unchanged), with dynamic shapes, so that one graph serves every batch
        shape; grad mode (training / encoding) and packed inputs (position ids) each add one graph. The head stays
        eager. The first call of each graph compiles (its time: docs/benchmarks.md); the vectors equal the eager
        ones up to float rounding (tests/model/test_encoder.py).

        ``frozen=True`` is for encoding only (``encode`` / ``evaluate`` ``--compile``): inductor's freezing folds the
        linear layers' weights into the inference graph as constants (on a CPU prepacked for oneDNN; speed:
        docs/benchmarks.md), but a change to them afterwards is not seen: never freeze a model that still trains."""
        self.model.compile(dynamic=True)
        self._frozen = frozen

    def _backbone(self, inputs: dict[str, Any]) -> torch.Tensor:
        """The backbone's output (``.logits``: the projection's inputs inside ``projection_bypassed``). A frozen
        backbone runs under inductor's freezing, which Dynamo reads when it traces (at a call, not at ``compile``):
        set around every call, so that the weights become constants of the graph (given as options to
        ``torch.compile`` instead, they stay graph inputs and nothing is folded)."""
        if not self._frozen:
            return self.model(**inputs).logits
        import torch._inductor.config as inductor

        with inductor.patch(freezing=True):
            return self.model(**inputs).logits

    def head_inputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, nn.Linear]:
        """Run the backbone up to (not including) the vocabulary projection: (h: B × L × H, projection)."""
        with projection_bypassed(self.model) as projection:
            hidden = self._backbone(batch)
        return hidden, projection

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Differentiable SPLADE vectors, B × V."""
        hidden, projection = self.head_inputs(batch)
        return self.pool(hidden, projection.weight, projection.bias, batch["attention_mask"])

    def forward_texts(
        self, texts: Sequence[str], max_length: int | None = None, groups: int = 1, packing: bool = False
    ) -> tuple[torch.Tensor, int]:
        """Differentiable B × V vectors of ``texts`` (in order) and the real tokens read: one padded batch
        (``groups=1``), the texts cut by token length into at most ``groups`` batches (:func:`length_groups`),
        each padded only to its own longest text, or (``packing=True``) the texts packed end to end into rows as
        long as the longest (:mod:`spladekit.model.packing`; the padded batch where the architecture cannot
        pack or packing saves no row). Every text is encoded on its own either way (positions, masks and
        pooling are per text), so the vectors are the same up to float rounding; fewer padded tokens go through
        the backbone."""
        if packing and groups != 1:
            raise SpladekitError(f"packing and length groups ({groups}) exclude each other: choose one")
        if groups == 1 and not (packing and packable(self.model)):
            batch = self.tokenize(list(texts), max_length)
            return self(batch), int(batch["attention_mask"].sum())
        encodings = self.tokenizer(self.prepare_texts(texts), truncation=True, max_length=self.token_limit(max_length))
        lengths = np.array([len(ids) for ids in encodings["input_ids"]])
        if packing:
            return self._forward_packed(encodings), int(lengths.sum())
        parts = []
        cut = length_groups(lengths, groups)
        for members in cut:
            features = {name: [encodings[name][i] for i in members] for name in self._input_names if name in encodings}
            parts.append(self._forward_padded(features))
        return in_order(parts, cut), int(lengths.sum())

    def _forward_padded(self, features: dict[str, list[list[int]]]) -> torch.Tensor:
        padded = self.tokenizer.pad(features, return_tensors="pt")
        return self({name: padded[name].to(self.device) for name in features})

    def _forward_packed(self, encodings: dict[str, list[list[int]]]) -> torch.Tensor:
        """Vectors of tokenized texts through packed rows (:func:`spladekit.model.packing.pack`); one padded
        batch when packing leaves every text in a row of its own (nothing to save; no mask to build)."""
        features = {name: encodings[name] for name in self._input_names if name in encodings}
        packed = pack(features, self.tokenizer.pad_token_id, position_offset(self.model), self.device)
        if packed.shape[0] == len(features["input_ids"]):
            return self._forward_padded(features)
        inputs = dict(packed.inputs, attention_mask=block_diagonal_mask(self.model, packed))
        with projection_bypassed(self.model) as projection:
            hidden, mask = unpack(self._backbone(inputs), packed)
        # one head pass over the padded layout: cut by length into groups it is slower (every pass copies the V × H
        # projection and makes a dense V × H weight gradient; benchmarks/packed_head_bench.py: 4 groups run at
        # 0.75× at BERT-base, 0.92× at splade-tiny)
        return self.pool(hidden, projection.weight, projection.bias, mask)

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        description: str = "encoding",
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Encode texts to a float32 CSR matrix (rows in input order; one string is one text, one row);
        ``max_length`` defaults to the document side's limit (:meth:`encode_document` without pruning).

        Texts are sorted by token length so each batch pads little; results are put back in order. A batch that
        does not fit in the device's memory is retried at half the size, and the rest continues at that size (the
        longest texts come first, so the first batch is the largest that has to fit). A text
        whose vector holds NaN or inf (a damaged model) is a :class:`NonFiniteVector` error naming its
        position (and its id, from ``ids`` when given): such vectors are never returned.
        """
        texts = text_list(texts)
        if not texts:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        if batch_size < 1:
            raise SpladekitError(f"batch_size must be >= 1, got {batch_size}")
        max_length = self.token_limit(max_length)
        # token counts only, a slice at a time: the token id lists of every text would cost ~9 KB a text
        lengths = [
            len(ids)
            for start in range(0, len(texts), LENGTH_SLICE)
            for ids in self.tokenizer(
                self.prepare_texts(texts[start : start + LENGTH_SLICE]), truncation=True, max_length=max_length
            )["input_ids"]
        ]
        order = np.argsort(-np.asarray(lengths), kind="stable")
        was_training = self.model.training
        if was_training:  # eval() walks every module: a millisecond per call on a small model, so only when needed
            self.model.eval()
        blocks = []
        try:
            with (
                torch.inference_mode(),
                reusing_projection(),
                tqdm(
                    total=len(texts), desc=description, unit="text", disable=not show_progress, leave=False
                ) as progress,
            ):
                start = 0
                while start < len(texts):
                    chunk = order[start : start + batch_size]
                    batch = self.tokenize([texts[i] for i in chunk], max_length=max_length)
                    try:
                        with autocast(self.device, self.bf16):
                            vectors = self.forward(batch).float()
                    except torch.OutOfMemoryError:
                        if batch_size == 1:
                            raise
                        del batch
                        batch_size = smaller_batch(batch_size, self.device)
                        continue
                    start += len(chunk)
                    finite = torch.isfinite(vectors).all(dim=1)
                    if not bool(finite.all()):
                        index = int(chunk[int((~finite).nonzero()[0, 0])])
                        name = f"text {index}" + ("" if ids is None else f" (id {ids[index]!r})")
                        raise NonFiniteVector(
                            f"{name} encodes to a vector with NaN/inf weights: the model is "
                            f"damaged (non-finite or overflowing weights)",
                            index,
                        )
                    blocks.append(dense_to_csr(vectors))
                    progress.update(len(chunk))
        finally:
            if was_training:
                self.model.train()
        stacked = sp.vstack(blocks, format="csr")
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        result = stacked[inverse]
        result.sort_indices()
        return result.astype(np.float32)

    def side_max_length(self, side: Side, max_length: int | None = None) -> int:
        """The token limit used to encode ``side``: ``max_length`` when given, else the side's own
        (documents: ``self.max_length``; queries: ``self.query_max_length``, or ``self.max_length`` when the
        model records none)."""
        check_side(side)
        if max_length is not None:
            return self.token_limit(max_length)
        return (self.query_max_length or self.max_length) if side == "query" else self.max_length

    def encode_query(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        max_active_dims: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Encode queries (token limit :meth:`side_max_length` ``("query")``) to a float32 CSR matrix; with
        ``max_active_dims`` only the k largest weights of each vector are kept
        (:func:`spladekit.common.sparse.keep_top_weights`)."""
        return self._encode_side("query", texts, batch_size, max_length, show_progress, max_active_dims, ids)

    def encode_document(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        max_active_dims: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Encode documents (token limit ``max_length``, else the model's) to a float32 CSR matrix; with
        ``max_active_dims`` only the k largest weights of each vector are kept."""
        return self._encode_side("document", texts, batch_size, max_length, show_progress, max_active_dims, ids)

    def _encode_side(
        self,
        side: Side,
        texts: str | Sequence[str],
        batch_size: int,
        max_length: int | None,
        show_progress: bool,
        max_active_dims: int | None,
        ids: Sequence[str] | None,
    ) -> sp.csr_matrix:
        check_max_active_dims(max_active_dims)  # before any encoding
        vectors = self.encode(
            texts,
            batch_size=batch_size,
            max_length=self.side_max_length(side, max_length),
            show_progress=show_progress,
            description="encoding queries" if side == "query" else "encoding documents",
            ids=ids,
        )
        return vectors if max_active_dims is None else keep_top_weights(vectors, max_active_dims)

    def decode(self, row: sp.csr_matrix, top: int | None = None) -> dict[str, float]:
        """Readable form of one vector: {token: weight}, heaviest first."""
        row = row.tocsr()
        pairs = sorted(zip(row.indices.tolist(), row.data.tolist()), key=lambda pair: -pair[1])[:top]
        if self.fold is not None:
            tokens = [self.fold.dimension_tokens[index] for index, _ in pairs]
        else:
            tokens = list(self.tokenizer.convert_ids_to_tokens([index for index, _ in pairs]))
        return {token: weight for token, (_, weight) in zip(tokens, pairs)}
