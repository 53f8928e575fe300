"""spladekit model → a folder that ``sentence_transformers.SparseEncoder(folder)`` loads.

Built with sentence-transformers' own modules, so the layout is whatever the installed version writes:
``Transformer(transformer_task="fill-mask")`` (the successor of ``MLMTransformer``) over the masked-LM
folder, then ``SpladePooling(pooling_strategy="max", activation_function="relu")`` — exactly
``max_t log1p(relu(logits))`` over non-padding tokens, spladekit's pooling. The tokenizer's
``model_max_length`` is set to the encoder's ``max_length`` so both truncate alike. The folder also keeps
``spladekit.json`` and spladekit's model card, so spladekit loads it back with the same settings.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from spladekit.common.atomic import atomic_directory
from spladekit.common.errors import SpladekitError
from spladekit.model.backbone import quiet_transformers
from spladekit.model.card import write_model_card
from spladekit.model.inference_free import document_encoder
from spladekit.model.metadata import METADATA_FILE

if TYPE_CHECKING:
    from spladekit.model.encoder import SparseEncoder
    from spladekit.model.inference_free import InferenceFreeEncoder

STAGED_MODEL = "_mlm"


def _sentence_transformers() -> ModuleType:
    try:
        from sentence_transformers import sparse_encoder
    except ImportError:
        raise SpladekitError("sentence-transformers is not installed: pip install 'spladekit[interop]'") from None
    return sparse_encoder


def export_sentence_transformers(
    encoder: SparseEncoder | InferenceFreeEncoder,
    output: str | Path,
    overwrite: bool = False,
    trust_remote_code: bool = False,
) -> Path:
    """Write ``encoder`` (a spladekit ``SparseEncoder``, or an ``InferenceFreeEncoder`` as a ``Router``) as a
    sentence-transformers SparseEncoder folder."""
    check_expressible(encoder)
    st = _sentence_transformers()
    output = Path(output)
    with quiet_transformers(), shift_in_bias(encoder):  # one-line CLI output, as in backbone loading
        _write(st, encoder, output, overwrite, trust_remote_code)
    return output


def check_expressible(encoder: SparseEncoder | InferenceFreeEncoder) -> None:
    """Refuse, in one line naming the option, a head option ``SpladePooling`` cannot express: ``position_top_k``,
    ``vocab_fold``, ``lowercase``, and a ``logit_shift`` on a projection without a bias to carry it."""
    options = encoder.head_options
    for name in ("position_top_k", "vocab_fold", "lowercase"):
        if name in options.changed():
            raise SpladekitError(
                f"the model's head option {name}={getattr(options, name)} has no sentence-transformers equivalent "
                "(SpladePooling is max log(1 + relu(logits))): export it as ONNX (spladekit export onnx), which "
                "carries it"
            )
    if options.logit_shift and document_encoder(encoder).head.bias is None:
        raise SpladekitError(
            f"the model's head option logit_shift={options.logit_shift:g} goes into the vocabulary projection's bias "
            "for sentence-transformers, and this projection has none: export it as ONNX (spladekit export onnx)"
        )


@contextmanager
def shift_in_bias(encoder: SparseEncoder | InferenceFreeEncoder) -> Iterator[None]:
    """While exporting, ``logit_shift`` s moves into the projection's bias (b − s: exactly ``ReLU(logit − s)``
    under ``SpladePooling``) and leaves the recorded options, so nothing shifts twice; restored afterwards."""
    document = document_encoder(encoder)
    options, bias = document.head_options, document.head.bias
    if not options.logit_shift or bias is None:
        yield
        return
    saved = bias.detach().clone()
    with torch.no_grad():
        bias.sub_(float(options.logit_shift))
    document.head_options = dataclasses.replace(options, logit_shift=0.0)
    try:
        yield
    finally:
        with torch.no_grad():
            bias.copy_(saved)
        document.head_options = options


def _write(
    st: ModuleType,
    encoder: SparseEncoder | InferenceFreeEncoder,
    output: Path,
    overwrite: bool,
    trust_remote_code: bool,
) -> None:
    from spladekit.model.inference_free import InferenceFreeEncoder

    with atomic_directory(output, overwrite=overwrite) as staging:
        encoder.save(staging / STAGED_MODEL)
        remote = {"trust_remote_code": True} if trust_remote_code else {}
        transformer = st.modules.Transformer(
            str(staging / STAGED_MODEL),
            transformer_task="fill-mask",
            max_seq_length=encoder.max_length,
            model_kwargs=remote,
            processor_kwargs=remote,
            config_kwargs=remote,
        )
        pooling = st.modules.SpladePooling(
            pooling_strategy="max", activation_function="relu", embedding_dimension=encoder.vocab_size
        )
        if isinstance(encoder, InferenceFreeEncoder):
            from transformers import AutoTokenizer

            query_tokenizer = AutoTokenizer.from_pretrained(str(staging / STAGED_MODEL), **remote)
            query_tokenizer.model_max_length = encoder.query_max_length  # where SparseStaticEmbedding truncates
            static = st.modules.SparseStaticEmbedding(
                tokenizer=query_tokenizer,
                weight=encoder.query_weights.detach().float().cpu().clone(),
                frozen=not encoder.query_weights.requires_grad,
            )
            modules = [
                st.modules.Router.for_query_document(query_modules=[static], document_modules=[transformer, pooling])
            ]
        else:
            modules = [transformer, pooling]
        model = st.SparseEncoder(modules=modules, similarity_fn_name="dot", device="cpu")
        model.save(str(staging))
        shutil.copy(staging / STAGED_MODEL / METADATA_FILE, staging / METADATA_FILE)
        shutil.rmtree(staging / STAGED_MODEL)
        write_model_card(staging, encoder, name=output)  # replaces the generic card sentence-transformers wrote
