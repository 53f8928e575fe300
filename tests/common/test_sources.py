"""sources: the local-or-remote rule, the shared assets folder, and failed downloads as one error line."""

from __future__ import annotations

import httpx2
import pytest
import requests
from huggingface_hub import constants
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

from spladekit.common import sources
from spladekit.common.errors import InputError
from spladekit.common.sources import fetching, is_local, is_local_model, shared_folder


def test_paths_and_ids():
    assert is_local("./model") and is_local("/nope/model") and not is_local("org/model")
    assert is_local_model("beir/scifact/test") and not is_local_model("org/model")


def fake_checkout(root, with_pyproject: bool):
    package = root / "repo" / "src" / "spladekit" / "common"
    package.mkdir(parents=True)
    (root / "shared").mkdir()
    if with_pyproject:
        (root / "repo" / "pyproject.toml").write_text("")
    return package / "sources.py"


def test_shared_folder_is_beside_a_source_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "__file__", str(fake_checkout(tmp_path, with_pyproject=True)))
    assert shared_folder() == tmp_path / "shared"


def test_an_installed_package_never_looks_outside_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "__file__", str(fake_checkout(tmp_path, with_pyproject=False)))
    assert shared_folder() is None


def transformers_offline_error() -> OSError:
    """What transformers raises for a hub id that is not cached with HF_HUB_OFFLINE=1 (measured, 5.24)."""
    try:
        raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")
    except LocalEntryNotFoundError as cause:
        try:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") from cause
        except OSError as error:
            return error


def test_a_hub_id_not_cached_offline_names_the_id_and_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(InputError) as caught, fetching("org/model", "hub", "a local model folder"):
        raise transformers_offline_error()
    message = str(caught.value)
    assert message.startswith("org/model: not in the Hugging Face cache " + str(tmp_path / "hub"))
    assert "HF_HUB_OFFLINE is set" in message and "a local model folder" in message and "\n" not in message


def test_an_ir_datasets_download_without_network_names_its_home(tmp_path, monkeypatch):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    with pytest.raises(InputError) as caught, fetching("beir/scifact", "ir_datasets", "a BEIR folder"):
        raise requests.ConnectionError("Max retries exceeded (NameResolutionError)")  # what ir_datasets raised here
    assert f"the ir_datasets home {tmp_path / 'irds'} (IR_DATASETS_HOME)" in str(caught.value)
    assert "no network" in str(caught.value)


def test_an_ir_datasets_lazy_download_without_network_is_one_line(tmp_path, monkeypatch):
    """A collection's documents are downloaded when first read; every source failing then raises the errors inside
    a RuntimeError's arguments (ir_datasets 0.5, util/download.py; seen from `make demo` in a clone without
    network: a traceback before this)."""
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    with (
        pytest.raises(InputError, match=r"cranfield: not in the ir_datasets home .* \(no network\)"),
        fetching("cranfield", "ir_datasets", "a BEIR folder"),
    ):
        raise RuntimeError(
            "All download sources failed",
            [
                (
                    "http://ir.dcs.gla.ac.uk/resources/test_collections/cran/cran.tar.gz",
                    requests.ConnectionError("Max retries exceeded (NameResolutionError)"),
                )
            ],
        )


def test_an_unknown_hub_repository():
    with (
        pytest.raises(InputError, match="no such repository on the Hugging Face hub"),
        fetching("org/none", "hub", "a local model folder"),
    ):
        request = httpx2.Request("GET", "https://huggingface.co/api/models/org/none")
        raise OSError("org/none is not a local folder") from RepositoryNotFoundError(
            "404", response=httpx2.Response(404, request=request)
        )


def test_other_errors_pass_unchanged():
    with pytest.raises(ValueError, match="bad shape"), fetching("org/model", "hub", "a local model folder"):
        raise ValueError("bad shape")
