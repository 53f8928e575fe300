"""README.md model card written into every saved model folder.

The card says what the model is (backbone, architecture, head rescaling k and mode, head norms), how it
was trained and how it scored when the caller knows (a ``training`` dict, ``evaluation`` results), and how to
load it with spladekit, sentence-transformers (after ``spladekit export``) and plain transformers. The
metadata block is written by ``huggingface_hub.ModelCard`` so that the Hub reads it as it writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from huggingface_hub import ModelCard, ModelCardData

from spladekit.common.atomic import atomic_file, final_path
from spladekit.model.head import head_norms, rescale_record
from spladekit.model.head_options import HeadOptions

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class CardSubject(Protocol):
    """What the card reads of a model (a ``SparseEncoder`` or an ``InferenceFreeEncoder``)."""

    @property
    def model(self) -> PreTrainedModel: ...
    @property
    def original_backbone(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_length(self) -> int: ...
    @property
    def query_max_length(self) -> int | None: ...
    @property
    def card_notes(self) -> Sequence[str]: ...
    @property
    def head_options(self) -> HeadOptions: ...


class CardEvaluation(Protocol):
    """What the card reads of an evaluation (an ``EvaluationResult``): one table row."""

    @property
    def name(self) -> str: ...
    @property
    def measures(self) -> Sequence[str]: ...
    @property
    def metrics(self) -> dict[str, float]: ...
    @property
    def efficiency(self) -> dict[str, Any]: ...


CARD_FILE = "README.md"
CARD_DATA: dict[str, Any] = {"library_name": "spladekit", "tags": ["sparse-retrieval", "splade"]}
NORM_KEYS = ("frobenius_norm", "mean_row_norm", "max_row_norm")
CARD_EFFICIENCY = ("flops", "avg_q_nnz", "avg_d_nnz")


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_number(cell) for cell in row) + " |" for row in rows]
    return lines


def _overview(encoder: CardSubject, name: str) -> list[str]:
    config = encoder.model.config
    record = rescale_record(encoder.model)
    rescaled = (
        "not rescaled (k = 1)"
        if record is None
        else (f"k = {record['k']:g}, mode = `{record['mode']}`, bias rescaled: {record['rescale_bias']}")
    )
    architecture = (getattr(config, "architectures", None) or [type(encoder.model).__name__])[0]
    return [
        "",
        f"# {name}",
        "",
        (
            "SPLADE learned-sparse retriever built with spladekit: "
            "`w_v = max_t log(1 + ReLU(h_t · W_v + b_v))`, scored by dot product."
        ),
        "",
        f"- **Backbone:** `{encoder.original_backbone}` "
        f"({architecture}, model_type `{getattr(config, 'model_type', '')}`)",
        f"- **Vocabulary:** {encoder.vocab_size} terms; **max length:** {encoder.max_length} tokens"
        + ("" if encoder.query_max_length is None else f" (queries: {encoder.query_max_length})"),
        f"- **Head rescaling:** {rescaled}",
        f"- **Head options:** {_head_options(encoder.head_options)}",
    ]


def _head_options(options: HeadOptions) -> str:
    if options.plain:
        return "none (the plain SPLADE head)"
    rules = {
        "logit_shift": f"`logit_shift = {options.logit_shift:g}`: "
        f"`w_v = max_t log(1 + ReLU(logit - {options.logit_shift:g}))`",
        "position_top_k": f"`position_top_k = {options.position_top_k}`: each token keeps its "
        f"{options.position_top_k} largest logits before the max",
        "vocab_fold": f"`vocab_fold = {options.vocab_fold}`: token variants share a dimension "
        "(the map: `vocabulary_fold.json`)",
        "lowercase": "`lowercase`: texts are lowercased before tokenization",
    }
    return "; ".join(rules[name] for name in options.changed())


def _norms(encoder: CardSubject, training: dict | None) -> list[str]:
    final = head_norms(encoder.model)
    initial = (training or {}).get("initial_head_norms")
    header = ["head norm", "initial", "final"] if initial else ["head norm", "value"]
    rows = [[key, initial.get(key), final[key]] if initial else [key, final[key]] for key in NORM_KEYS]
    return ["", "## Vocabulary projection (MLM head)", "", *_table(header, rows)]


def _training(training: dict | None) -> list[str]:
    recipe = {key: value for key, value in (training or {}).items() if key != "initial_head_norms"}
    if not recipe:
        return []
    return ["", "## Training recipe", "", *_table(["setting", "value"], [[k, v] for k, v in recipe.items()])]


def _evaluation(evaluation: Sequence[CardEvaluation]) -> list[str]:
    """One row per evaluated collection: its measures, then FLOPS and average nnz."""
    if not evaluation:
        return []
    measures = list(dict.fromkeys(measure for result in evaluation for measure in result.measures))
    metrics = [*measures, *CARD_EFFICIENCY]
    rows = [
        [result.name, *(result.metrics.get(m) for m in measures), *(result.efficiency.get(k) for k in CARD_EFFICIENCY)]
        for result in evaluation
    ]
    return ["", "## Evaluation", "", *_table(["dataset", *metrics], rows)]


def _usage(folder: Path, options: HeadOptions) -> list[str]:
    by_hand = [
        "transformers (SPLADE pooling by hand):",
        "",
        "```python",
        "import torch",
        "from transformers import AutoModelForMaskedLM, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
        f'model = AutoModelForMaskedLM.from_pretrained("{folder}")',
        'batch = tokenizer(["what is splade?"], return_tensors="pt", padding=True, truncation=True)',
        "logits = model(**batch).logits",
        'vectors = (torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)).amax(dim=1)',
        "```",
    ]
    if not options.plain:  # the plain formula would give other vectors than this model's
        by_hand = [
            "Load it with spladekit: the head options above are part of the model, and plain SPLADE pooling "
            "(transformers by hand) would give other vectors."
        ]
    return [
        "",
        "## How to load",
        "",
        "spladekit:",
        "",
        "```python",
        "from spladekit.model.encoder import SparseEncoder",
        "",
        f'encoder = SparseEncoder.from_pretrained("{folder}")',
        'queries = encoder.encode_query(["what is splade?"])  # scipy CSR, float32',
        'documents = encoder.encode_document(["SPLADE is a learned sparse retriever."])',
        "```",
        "",
        (
            "sentence-transformers (export first: "
            f"`spladekit export sentence-transformers {folder} --output {folder}-st`):"
        ),
        "",
        "```python",
        "from sentence_transformers import SparseEncoder",
        "",
        f'model = SparseEncoder("{folder}-st")',
        'embeddings = model.encode(["what is splade?"])',
        "```",
        "",
        *by_hand,
    ]


def model_card(
    folder: str | Path, encoder: CardSubject, training: dict | None = None, evaluation: Sequence[CardEvaluation] = ()
) -> str:
    """The card text; ``training`` = recipe settings (+ optional ``initial_head_norms``), ``evaluation`` =
    the results to report (one table row each)."""
    folder = Path(folder)
    title = folder.parent.name if folder.name == "model" else folder.name  # a training run's model/
    sections = _overview(encoder, title or str(folder)) + _norms(encoder, training) + _training(training)
    notes = [line for note in encoder.card_notes for line in ("", note)]
    body = "\n".join(sections + _evaluation(evaluation) + _usage(folder, encoder.head_options) + notes) + "\n"
    # the metadata block written first, so that ModelCard finds it (without one it logs that it found none)
    return str(ModelCard(f"---\n{ModelCardData(**CARD_DATA).to_yaml()}\n---\n{body}"))


def write_model_card(
    folder: str | Path,
    encoder: CardSubject,
    training: dict | None = None,
    evaluation: Sequence[CardEvaluation] = (),
    name: str | Path | None = None,
) -> Path:
    """Write ``folder/README.md`` atomically; ``name`` is the path shown in the loading snippets."""
    target = Path(folder) / CARD_FILE
    with atomic_file(target) as stream:  # a folder being staged is shown under its final name
        stream.write(model_card(final_path(name or folder), encoder, training, evaluation))
    return target
