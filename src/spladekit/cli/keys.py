"""keys: every training-config key, sweep-file key and backend parameter, with its allowed values, default and
help, from the one set of declarations that also parses and checks them (:mod:`spladekit.common.schema`)."""

from __future__ import annotations

import typer

from spladekit.cli.app import app
from spladekit.common.errors import SpladekitError
from spladekit.common.schema import Declaration

KINDS = ("train", "sweep", "backends")


def reference(kind: str) -> dict[str, list[Declaration]]:
    """The declarations of ``kind`` (train: a training config; sweep: a sweep file; backends: each backend's
    ``--param``), by section."""
    from spladekit.common.schema import declarations

    if kind == "train":
        from spladekit.training.config import TrainConfig

        return {"training config (`spladekit train CONFIG`, `--set KEY=VALUE`)": list(declarations(TrainConfig))}
    if kind == "sweep":
        from spladekit.experiments.sweep_config import BackboneSpec, SweepConfig

        return {
            "sweep file (`spladekit sweep FILE`)": list(declarations(SweepConfig)),
            "each entry of backbones": list(declarations(BackboneSpec, "backbones[].")),
        }
    if kind == "backends":
        from spladekit.index import BACKENDS

        return {
            f"{name} (`--backend {name} --param NAME=VALUE`)": [param.declaration for param in searcher.declared_params]
            for name, searcher in BACKENDS.items()
        }
    raise SpladekitError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")


@app.command()
def keys(
    kind: str = typer.Argument("train", help="What to list: train (config keys), sweep (sweep-file keys) or backends."),
) -> None:
    """List every key a training config or sweep file takes (or every backend parameter): allowed values, default,
    help. Unknown keys and values outside these are refused, with the key named."""
    for section, declared in reference(kind).items():
        typer.echo(f"# {section}")
        for declaration in declared:
            typer.echo(declaration.describe())
        typer.echo("")
