"""Shared fixtures: tiny models of every seed architecture (built once per session) and ../shared paths."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

# Triton kernels run on this CPU through Triton's interpreter (numpy) where no GPU is present: set before anything
# imports triton, which reads it when a kernel is defined
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if importlib.util.find_spec("triton") is not None:
        # the kernels are made now, interpreted, whichever test imports the module first (the refusal tests import
        # it with the variable unset)
        import spladekit.model.triton_head  # noqa: F401

from tiny_models import ARCHITECTURES, build_tiny_model

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SHARED_MODELS = SHARED / "models"
SHARED_DATA = SHARED / "data"


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: build_tiny_model(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture(params=ARCHITECTURES)
def tiny_model_dir(request, tiny_model_dirs) -> Path:
    return tiny_model_dirs[request.param]


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (offline assets live in ../shared beside the repo)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _no_temporary_state_left(tmp_path_factory):
    """Every temporary file or folder spladekit makes (engine databases, scratch and staging folders, locks), in
    this process or in the commands the tests run, goes into one folder of its own ($TMPDIR): empty at the end of
    the suite, or the suite fails naming what was left. pytest's own tmp_path folders are elsewhere (made first)."""
    # torch's compile cache is a cache by design (persistent, in $TMPDIR by default): kept out of the check
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "torchinductor"))
    folder = tempfile.mkdtemp(prefix="spladekit-suite-tmp-")
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = folder, folder
    yield Path(folder)
    if saved[0] is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = saved[0]
    tempfile.tempdir = saved[1]
    # torchrun's own log folders (torchelastic_*, made by torch.distributed.elastic for every launch) are torch's;
    # .ses is onnxruntime's (importing it writes a session id to $TMPDIR/.ses); torchinductor_<user> is torch.compile's
    # cache of compiled headers and kernels, which some of its parts place there whatever TORCHINDUCTOR_CACHE_DIR says
    left = sorted(
        path.name
        for path in Path(folder).iterdir()
        if not path.name.startswith(("torchelastic_", "torchinductor_")) and path.name != ".ses"
    )
    shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"temporary state left behind by the suite: {left}"


@pytest.fixture(scope="session", autouse=True)
def _cache_of_the_suite(tmp_path_factory):
    """spladekit's cache (training-data stores, encoded corpora) in a folder of the suite, never ~/.cache; a test
    that needs its own sets SPLADEKIT_CACHE itself."""
    saved = os.environ.get("SPLADEKIT_CACHE")
    os.environ["SPLADEKIT_CACHE"] = str(tmp_path_factory.mktemp("spladekit-cache"))
    yield
    if saved is None:
        del os.environ["SPLADEKIT_CACHE"]
    else:
        os.environ["SPLADEKIT_CACHE"] = saved


@pytest.fixture(autouse=True)
def _quiet_transformers():
    logging.getLogger("transformers").setLevel(logging.ERROR)
    yield


@dataclass
class CliResult:
    """What a CLI call returned, shaped like ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run ``spladekit ARGS…`` in this process (``spladekit.cli.main`` with ``sys.argv`` patched): the same
    entry point, error handling and exit codes as the console script, without a fresh interpreter importing
    torch each time. Tests that need a separate process (kill -9, two writers, torchrun) use subprocess."""
    from spladekit.cli import main

    def run(*args) -> CliResult:
        capsys.readouterr()  # drop what earlier steps printed
        monkeypatch.setattr(sys, "argv", ["spladekit", *map(str, args)])
        try:
            main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def refuse_model_loading(monkeypatch):
    """``spladekit.model.loading.load_model`` raising "loaded the model before the refusal", for tests that a
    command refuses before any work. Every spladekit module is imported first: a module first imported while the
    stub is in place (``from … import load_model`` at its top) would keep the stub for the rest of the session."""
    import importlib
    import pkgutil

    import spladekit
    import spladekit.model.loading

    for module in pkgutil.walk_packages(spladekit.__path__, "spladekit."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)

    def refuse(*args, **kwargs):
        raise AssertionError("loaded the model before the refusal")

    monkeypatch.setattr(spladekit.model.loading, "load_model", refuse)
