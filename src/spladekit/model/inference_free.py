"""Inference-free (document-only) SPLADE: a SPLADE document encoder and a per-token query weight table.

Documents go through the masked-LM backbone and SPLADE max pooling (a :class:`SparseEncoder`: head
rescaling, diagnosis and every backend apply to it unchanged). Queries are only tokenized: the vector of a
query q over the vocabulary is

    q_v = w_v · 1[v ∈ tokens(q)]

with ``w`` a table of V weights (a ``torch.nn.Parameter``, trainable or frozen). This is exactly
sentence-transformers' ``SparseStaticEmbedding`` (``sentence_transformers/sparse_encoder/modules/
sparse_static_embedding.py``, the query route of its inference-free ``Router`` models): the query is
tokenized **without special tokens** (``add_special_tokens=False``), truncated at the query token limit, a
token counts **once however often it occurs** (binary presence, ``scatter_`` of the attention mask), and
the presence is multiplied by the table. Scoring is the dot product with the document vector, so a
query costs a tokenization and an inverted-index lookup, as BM25 (Geng et al., "Towards Competitive Search
Relevance For Inference-Free Learned Sparse Retrievers", arXiv:2411.04403, 2024; OpenSearch's
``neural-sparse-encoding-doc`` models).

The table starts from the inverse document frequency of a corpus (:func:`idf_weights`), the formula of the
OpenSearch authors' IDF script (``get_idf.py`` in ``opensearch-sparse-model-tuning-sample``), i.e. the
BM25/Lucene IDF:

    idf(v) = ln(1 + (N − df(v) + 0.5) / (df(v) + 0.5))    for df(v) > 0,    0 otherwise

where N counts the documents with at least one non-special token and ``df(v)`` the documents whose tokens
(no special tokens, no truncation) include v. Tokens absent from the corpus get 0, as sentence-transformers'
``SparseStaticEmbedding.from_json`` gives tokens absent from an ``idf.json``: they are never active in a
query. sentence-transformers itself computes no IDF (it loads the table).

A saved inference-free model is a spladekit model folder (the document encoder: HF weights, tokenizer,
``spladekit.json``) plus ``query_weights.safetensors`` (tensor ``weight``, V float32), and ``spladekit.json``
records ``"kind": "inference-free"`` and ``query_max_length``. ``spladekit export
sentence-transformers`` writes it as a ``Router`` folder; :func:`spladekit.model.loading.load_model` reads
either back.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn
from tqdm.auto import tqdm

from spladekit.common.atomic import atomic_directory
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import expect, reading
from spladekit.common.sparse import check_max_active_dims, keep_top_weights
from spladekit.model.backbone import quiet_transformers
from spladekit.model.batches import text_list
from spladekit.model.card import CardEvaluation, write_model_card
from spladekit.model.encoder import DEFAULT_POOLING, SparseEncoder, check_side
from spladekit.model.folding import VocabularyFold
from spladekit.model.head_options import HeadOptions
from spladekit.model.metadata import METADATA_FILE, read_metadata

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

KIND = "inference-free"
QUERY_WEIGHTS_FILE = "query_weights.safetensors"
QUERY_WEIGHTS_TENSOR = "weight"  # the state-dict key of sentence-transformers' SparseStaticEmbedding
DEFAULT_QUERY_MAX_LENGTH = 32


def idf_weights(
    tokenizer: PreTrainedTokenizerBase,
    documents: Iterable[str],
    vocab_size: int,
    batch_size: int = 1000,
    show_progress: bool = True,
    total: int | None = None,
    token_map: np.ndarray | None = None,
) -> torch.Tensor:
    """The V-vector ``idf(v) = ln(1 + (N − df + 0.5) / (df + 0.5))`` (0 where ``df = 0``) of ``documents``.

    Texts are tokenized without special tokens and without truncation; special token ids never count;
    ``N`` is the number of documents holding at least one counted token (see the module docstring).
    ``documents`` is read ``batch_size`` texts at a time (``total``: its length, for the progress bar). With a
    vocabulary fold (``token_map``: token id → dimension, ``vocab_size`` dimensions) v is a dimension: a document
    holds it when it holds any of its tokens."""
    special = np.asarray(sorted(set(getattr(tokenizer, "all_special_ids", []) or [])), dtype=np.int64)
    df = np.zeros(vocab_size, dtype=np.int64)
    n_docs = 0
    texts = iter(documents)
    with (
        quiet_transformers(),
        tqdm(total=total, desc="document frequencies", unit="doc", disable=not show_progress, leave=False) as progress,
    ):
        while chunk := list(itertools.islice(texts, batch_size)):
            encoded = tokenizer(
                chunk,
                add_special_tokens=False,
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
            for ids in encoded:
                distinct = np.unique(np.asarray(ids, dtype=np.int64))
                distinct = distinct[~np.isin(distinct, special)]
                if token_map is not None:
                    distinct = np.unique(token_map[distinct[distinct < len(token_map)]])
                if distinct.size and distinct.max() >= vocab_size:
                    raise SpladekitError(
                        f"the tokenizer produced token id {int(distinct.max())}, beyond the "
                        f"model's {vocab_size} vocabulary dimensions"
                    )
                if distinct.size:
                    df[distinct] += 1
                    n_docs += 1
            progress.update(len(chunk))
    if n_docs == 0:
        raise SpladekitError("cannot compute IDF weights: no document holds a (non-special) token")
    seen = df > 0
    idf = np.zeros(vocab_size, dtype=np.float64)
    idf[seen] = np.log(1.0 + (n_docs - df[seen] + 0.5) / (df[seen] + 0.5))
    return torch.tensor(idf, dtype=torch.float32)


def read_query_weights(path: Path, vocab_size: int) -> torch.Tensor:
    """The query weight table stored in a safetensors file (tensor ``weight``): V finite numbers, else an
    :class:`InputError` naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise InputError("missing: an inference-free model needs its query weight table", path)
    with reading(path, "safetensors weights", SafetensorError):
        tensors = load_file(str(path))
    weight = tensors.get(QUERY_WEIGHTS_TENSOR)
    if weight is None or weight.dim() != 1 or not weight.is_floating_point():
        raise InputError(
            f"expected a 1-D float tensor {QUERY_WEIGHTS_TENSOR!r}, found "
            f"{ {name: tuple(t.shape) for name, t in tensors.items()} }",
            path,
        )
    if weight.shape[0] != vocab_size:
        raise InputError(
            f"the query weight table has {weight.shape[0]} entries, the document encoder "
            f"{vocab_size} vocabulary dimensions",
            path,
        )
    if not bool(torch.isfinite(weight).all()):
        raise InputError("the query weight table holds NaN or inf", path)
    return weight.float()


# Texts whose tokenization two tokenizers must agree on (case, accents, punctuation, digits, sub-words).
TOKENIZER_PROBE = ["What is the Capital of FRANCE?", "Crème brûlée, 42 km/h; e-mail: naïve résumé", "splade sparse"]


def check_same_tokenizer(tokenizer: PreTrainedTokenizerBase, query_folder: Path, trust_remote_code: bool) -> None:
    """A sentence-transformers ``Router`` stores a tokenizer per route; spladekit uses one. Refuse a query
    tokenizer whose vocabulary or tokenization differs from the document encoder's (its vectors would)."""
    from transformers import AutoTokenizer

    with quiet_transformers():  # the probe may exceed a short query limit: no truncation warning
        try:
            query_tokenizer = AutoTokenizer.from_pretrained(str(query_folder), trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as error:
            raise InputError(f"cannot load the query route's tokenizer ({error})", query_folder) from None
        same = query_tokenizer.get_vocab() == tokenizer.get_vocab() and (
            query_tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
            == tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
        )
    if not same:
        raise InputError(
            "the query route's tokenizer differs from the document route's; spladekit encodes "
            "both sides with one tokenizer",
            query_folder,
        )


def query_token_ids(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None
) -> list[list[int]]:
    """Token ids of each query as ``SparseStaticEmbedding.preprocess`` makes them (no special tokens)."""
    return tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=max_length)["input_ids"]


def weight_table_vectors(
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    table: np.ndarray,
    max_length: int | None,
    batch_size: int = 32,
    show_progress: bool = True,
    token_map: np.ndarray | None = None,
) -> sp.csr_matrix:
    """Query vectors of an inference-free model (CSR float32, rows in input order): ``table[v]`` for each distinct
    token v of each query (with a vocabulary fold, ``token_map``: each distinct dimension of its tokens), zero
    weights dropped."""
    indptr, indices, data = [0], [], []
    with tqdm(total=len(texts), desc="encoding queries", unit="text", disable=not show_progress, leave=False) as bar:
        for start in range(0, len(texts), batch_size):
            for tokens in query_token_ids(tokenizer, texts[start : start + batch_size], max_length):
                distinct = np.unique(np.asarray(tokens, dtype=np.int64))
                if token_map is not None:
                    distinct = np.unique(token_map[distinct])
                weights = table[distinct]
                keep = weights != 0
                indices.append(distinct[keep])
                data.append(weights[keep])
                indptr.append(indptr[-1] + int(keep.sum()))
            bar.update(len(texts[start : start + batch_size]))
    return sp.csr_matrix(
        (
            np.concatenate(data) if data else np.zeros(0, np.float32),
            np.concatenate(indices) if indices else np.zeros(0, np.int64),
            np.asarray(indptr),
        ),
        shape=(len(texts), len(table)),
        dtype=np.float32,
    )


class InferenceFreeEncoder(nn.Module):
    """Inference-free SPLADE: ``document_encoder`` (a :class:`SparseEncoder`) and ``query_weights`` (V).

    The retrieval API of :class:`SparseEncoder`: :meth:`encode_query`, :meth:`encode_document` (scipy CSR,
    float32, n × V) and :meth:`encode`, which encodes documents (the default route of a
    sentence-transformers ``Router.for_query_document``). ``model``, ``tokenizer``, ``max_length``,
    ``pooling``, ``vocab_size``… are the document encoder's, so evaluation, its cache, training and the head
    tools see the document side as a plain SPLADE model.
    """

    def __init__(
        self,
        document_encoder: SparseEncoder,
        query_weights: torch.Tensor | None = None,
        query_max_length: int = DEFAULT_QUERY_MAX_LENGTH,
        freeze_query_weights: bool = False,
        query_weights_origin: str | None = None,
    ):
        super().__init__()
        vocab_size = document_encoder.vocab_size
        if query_weights is None:
            query_weights = torch.ones(vocab_size)  # as SparseStaticEmbedding(weight=None)
        if query_weights.shape != (vocab_size,):
            raise SpladekitError(f"query weights must have shape ({vocab_size},), got {tuple(query_weights.shape)}")
        if query_max_length < 1:
            raise SpladekitError(f"query_max_length must be >= 1, got {query_max_length}")
        self.document_encoder = document_encoder
        self.query_weights = nn.Parameter(
            query_weights.detach().clone().float().to(document_encoder.device), requires_grad=not freeze_query_weights
        )
        self.query_max_length = query_max_length
        self.query_weights_origin = query_weights_origin

    # ----------------------------------------------------------------- the document side, delegated
    @property
    def model(self) -> PreTrainedModel:
        return self.document_encoder.model

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.document_encoder.tokenizer

    @property
    def max_length(self) -> int:
        return self.document_encoder.max_length

    @property
    def pooling(self) -> str:
        return self.document_encoder.pooling

    @property
    def head_options(self) -> HeadOptions:
        return self.document_encoder.head_options

    @property
    def fold(self) -> VocabularyFold | None:
        return self.document_encoder.fold

    def dimension_tokens(self) -> list[str]:
        return self.document_encoder.dimension_tokens()

    @property
    def bf16(self) -> bool:  # documents only: queries are table rows, no arithmetic to round
        return self.document_encoder.bf16

    @property
    def precision(self) -> str:  # documents only, as bf16
        return self.document_encoder.precision

    @property
    def vocab_size(self) -> int:
        return self.document_encoder.vocab_size

    @property
    def device(self) -> torch.device:
        return self.document_encoder.device

    @property
    def source(self) -> str:
        return self.document_encoder.source

    @property
    def original_backbone(self) -> str:
        return self.document_encoder.original_backbone

    def compile_backbone(self, frozen: bool = False) -> None:
        """Compile the document encoder's backbone (:meth:`SparseEncoder.compile_backbone`)."""
        self.document_encoder.compile_backbone(frozen)

    @property
    def fresh_keys(self) -> list[str]:
        return self.document_encoder.fresh_keys

    # ----------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        trust_remote_code: bool = False,
        device: str | None = None,
        max_length: int | None = None,
        query_max_length: int | None = None,
        pooling: str = DEFAULT_POOLING,
        bf16: bool = False,
    ) -> InferenceFreeEncoder:
        """Load a saved inference-free spladekit folder or a sentence-transformers inference-free ``Router``
        folder (see :mod:`spladekit.model.foreign`)."""
        from spladekit.model.foreign import resolve_model_folder

        path = Path(path).expanduser()
        documents = SparseEncoder.from_pretrained(
            path,
            trust_remote_code=trust_remote_code,
            device=device,
            max_length=max_length,
            pooling=pooling,
            bf16=bf16,
        )
        resolved = resolve_model_folder(path)
        frozen = False
        origin: object
        if resolved.settings.get("query_weights"):  # a sentence-transformers Router folder
            check_same_tokenizer(documents.tokenizer, Path(resolved.settings["query_folder"]), trust_remote_code)
            weights_file = Path(resolved.settings["query_weights"])
            stored_length = resolved.settings.get("query_max_length")
            frozen = bool(resolved.settings.get("query_frozen"))
            origin = f"sentence-transformers SparseStaticEmbedding ({path})"
        else:
            metadata = read_metadata(path)
            if metadata.get("kind") != KIND:
                raise SpladekitError(
                    f"{path}: not an inference-free model (spladekit.json has no "
                    f'"kind": "{KIND}"); load it with SparseEncoder.from_pretrained'
                )
            name = metadata.get("query_weights") or QUERY_WEIGHTS_FILE
            expect(name, str, "'query_weights'", path / METADATA_FILE)
            weights_file = path / Path(name).name
            stored_length = metadata.get("query_max_length")
            if stored_length is not None:
                expect(stored_length, int, "'query_max_length'", path / METADATA_FILE)
            origin = metadata.get("query_weights_origin")
            frozen = metadata.get("freeze_query_weights") is True
        weights = read_query_weights(weights_file, documents.vocab_size)
        return cls(
            documents,
            weights,
            query_max_length=query_max_length or stored_length or DEFAULT_QUERY_MAX_LENGTH,
            freeze_query_weights=frozen,
            query_weights_origin=origin if isinstance(origin, str) else None,
        )

    def save(
        self,
        directory: str | Path,
        overwrite: bool = False,
        training: dict | None = None,
        evaluation: Sequence[CardEvaluation] = (),
    ) -> Path:
        """The document encoder's files (:meth:`SparseEncoder.write_files`) + ``query_weights.safetensors`` +
        ``"kind": "inference-free"`` in ``spladekit.json`` + the model card, written atomically (``overwrite``
        as every command's ``--overwrite``); NaN/inf weights are refused before anything is written."""
        from safetensors.torch import save_file

        self.check_finite(f"{directory}: refusing to save")
        with atomic_directory(directory, overwrite=overwrite) as staging:
            self.document_encoder.write_files(staging)
            save_file(
                {QUERY_WEIGHTS_TENSOR: self.query_weights.detach().float().cpu().contiguous()},
                str(staging / QUERY_WEIGHTS_FILE),
            )
            metadata = read_metadata(staging) | {
                "kind": KIND,
                "query_weights": QUERY_WEIGHTS_FILE,
                "query_max_length": self.query_max_length,
                "query_weights_origin": self.query_weights_origin,
                "freeze_query_weights": not self.query_weights.requires_grad,
                "query_encoding": "w_v for each distinct token v of the query (no special tokens)",
            }
            (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
            write_model_card(staging, self, training, evaluation, name=directory)
        return Path(directory)

    @property
    def card_notes(self) -> tuple[str, ...]:
        return (
            "## Inference-free queries\n\nQueries are not encoded by the network: the vector of a query holds "
            "`w_v` for each distinct token v of the query (a learned table, "
            f"`{QUERY_WEIGHTS_FILE}`). Load with `spladekit.model.loading.load_model`.",
        )

    def check_finite(self, action: str) -> None:
        """SpladekitError ``"{action}: …"`` when a weight of either side is NaN or inf."""
        self.document_encoder.check_finite(action)
        if not bool(torch.isfinite(self.query_weights).all()):
            raise SpladekitError(f"{action}: the query weight table holds NaN or inf")

    def side_max_length(self, side: str, max_length: int | None = None) -> int:
        """The token limit used to encode ``side``: ``max_length`` when given, else the side's own."""
        check_side(side)
        return max_length or (self.query_max_length if side == "query" else self.max_length)

    # ----------------------------------------------------------------- queries
    def query_token_ids(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Token ids of each query as ``SparseStaticEmbedding.preprocess`` makes them (no special tokens)."""
        return query_token_ids(
            self.tokenizer, self.document_encoder.prepare_texts(texts), max_length or self.query_max_length
        )

    def query_forward(self, texts: Sequence[str], max_length: int | None = None) -> torch.Tensor:
        """Differentiable query vectors, B × V: ``presence(b, v) · w_v`` (training)."""
        ids = self.query_token_ids(texts, max_length)
        if self.fold is not None:  # the table's rows are the fold's dimensions
            ids = [self.fold.token_map[tokens].tolist() for tokens in ids]
        width = max(1, max(map(len, ids), default=1))
        input_ids = torch.zeros(len(ids), width, dtype=torch.long, device=self.device)
        mask = torch.zeros(len(ids), width, dtype=self.query_weights.dtype, device=self.device)
        for row, tokens in enumerate(ids):
            input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            mask[row, : len(tokens)] = 1
        # max, not scatter_: a padding position must not erase a real occurrence of the same id
        presence = torch.zeros(len(ids), self.vocab_size, dtype=mask.dtype, device=self.device)
        presence = presence.scatter_reduce(1, input_ids, mask, reduce="amax")
        return presence * self.query_weights

    def encode_query(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        max_active_dims: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Query vectors (CSR float32, rows in input order): ``w_v`` for each distinct token v of each query,
        zero weights dropped; ``max_active_dims`` keeps the heaviest k per query. No network runs."""
        check_max_active_dims(max_active_dims)
        if batch_size < 1:
            raise SpladekitError(f"batch_size must be >= 1, got {batch_size}")
        texts = text_list(texts)
        table = self.query_weights.detach().float().cpu().numpy()
        limit = max_length or self.query_max_length
        token_map = None if self.fold is None else self.fold.token_map
        prepared = self.document_encoder.prepare_texts(texts)
        matrix = weight_table_vectors(self.tokenizer, prepared, table, limit, batch_size, show_progress, token_map)
        return matrix if max_active_dims is None else keep_top_weights(matrix, max_active_dims)

    # ----------------------------------------------------------------- documents
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Differentiable document vectors, B × V (the document encoder's forward)."""
        return self.document_encoder(batch)

    def tokenize(self, texts: list[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        return self.document_encoder.tokenize(texts, max_length)

    def forward_texts(
        self, texts: Sequence[str], max_length: int | None = None, groups: int = 1, packing: bool = False
    ) -> tuple[torch.Tensor, int]:
        """Differentiable document vectors and the real tokens read (the document encoder's ``forward_texts``)."""
        return self.document_encoder.forward_texts(texts, max_length, groups, packing)

    def encode_document(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        max_active_dims: int | None = None,
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Document vectors: the SPLADE document encoder (:meth:`SparseEncoder.encode`), optionally pruned to
        the ``max_active_dims`` heaviest weights per document."""
        check_max_active_dims(max_active_dims)
        matrix = self.document_encoder.encode(
            texts, batch_size=batch_size, max_length=max_length, show_progress=show_progress, ids=ids
        )
        return matrix if max_active_dims is None else keep_top_weights(matrix, max_active_dims)

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        max_length: int | None = None,
        show_progress: bool = True,
        description: str = "encoding",
        ids: Sequence[str] | None = None,
    ) -> sp.csr_matrix:
        """Documents (the default route, as in sentence-transformers); queries: :meth:`encode_query`."""
        return self.document_encoder.encode(
            texts,
            batch_size=batch_size,
            max_length=max_length,
            show_progress=show_progress,
            description=description,
            ids=ids,
        )

    def decode(self, row: sp.csr_matrix, top: int | None = None) -> dict[str, float]:
        return self.document_encoder.decode(row, top)


def document_encoder(model: SparseEncoder | InferenceFreeEncoder) -> SparseEncoder:
    """The SparseEncoder that holds a model's backbone and head: the model itself, or an inference-free model's
    document encoder (its queries are a weight table)."""
    return model.document_encoder if isinstance(model, InferenceFreeEncoder) else model
