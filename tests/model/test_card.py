"""Model card (README.md) written into every saved model folder."""

from __future__ import annotations

from huggingface_hub import ModelCard

from spladekit.evaluation.result import EvaluationResult
from spladekit.model.card import write_model_card
from spladekit.model.encoder import SparseEncoder
from spladekit.model.head import head_norms, rescale


def test_saved_folder_has_a_card_with_backbone_k_norms_and_loading(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["roberta"], max_length=64)
    rescale(encoder.model, 8.0, mode="untie")
    out = tmp_path / "model"
    encoder.save(out)
    card = (out / "README.md").read_text()
    assert f"`{tiny_model_dirs['roberta']}` (RobertaForMaskedLM" in card
    assert "k = 8, mode = `untie`" in card
    assert f"| frobenius_norm | {head_norms(encoder.model)['frobenius_norm']:.4g} |" in card
    assert "max length:** 64 tokens" in card
    assert f'SparseEncoder.from_pretrained("{out}")' in card  # the final path, not the staging folder
    assert f'AutoModelForMaskedLM.from_pretrained("{out}")' in card
    assert f"spladekit export sentence-transformers {out} --output {out}-st" in card
    assert "## Training recipe" not in card and "## Evaluation" not in card
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_card_without_rescaling(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    encoder.save(tmp_path / "m")
    assert "not rescaled (k = 1)" in (tmp_path / "m" / "README.md").read_text()


def test_card_with_training_and_evaluation(tiny_model_dirs, tmp_path):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    initial = head_norms(encoder.model)
    training = {"loss": "infonce", "steps": 200, "lambda_d": 1e-3, "initial_head_norms": initial}
    evaluation = [
        EvaluationResult(
            "scifact",
            ("nDCG@10", "RR@10"),
            {"nDCG@10": 0.6112, "RR@10": 0.58},
            efficiency={"flops": 2.5, "avg_q_nnz": 20.0, "avg_d_nnz": 100.0},
        ),
        EvaluationResult("cisi", ("nDCG@10",), {"nDCG@10": 0.312}),
    ]
    card = write_model_card(tmp_path, encoder, training=training, evaluation=evaluation).read_text()
    assert "| head norm | initial | final |" in card
    assert f"| frobenius_norm | {initial['frobenius_norm']:.4g} | {initial['frobenius_norm']:.4g} |" in card
    assert "| steps | 200 |" in card and "| loss | infonce |" in card and "initial_head_norms" not in card
    assert "| dataset | nDCG@10 | RR@10 | flops | avg_q_nnz | avg_d_nnz |" in card
    assert "| scifact | 0.6112 | 0.58 | 2.5 | 20 | 100 |" in card and "| cisi | 0.312 | — | — | — | — |" in card


def test_card_of_a_resaved_model_names_the_original_backbone(tiny_model_dirs, tmp_path):
    SparseEncoder.from_pretrained(tiny_model_dirs["bert"]).save(tmp_path / "run" / "model")
    SparseEncoder.from_pretrained(tmp_path / "run" / "model").save(tmp_path / "again")
    card = (tmp_path / "again" / "README.md").read_text()
    assert f"**Backbone:** `{tiny_model_dirs['bert']}`" in card
    assert (tmp_path / "run" / "model" / "README.md").read_text().splitlines()[7] == "# run"


def test_card_metadata_reads_back_with_huggingface_hub(tiny_model_dirs, tmp_path):
    SparseEncoder.from_pretrained(tiny_model_dirs["bert"]).save(tmp_path / "m")
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.library_name == "spladekit"
    assert {"sparse-retrieval", "splade"} <= set(card.data.tags)
    assert card.text.startswith("\n# m\n") and "## How to load" in card.text
