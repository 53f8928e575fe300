"""Load any masked-language-model backbone and locate its vocabulary projection.

The projection is found through ``get_output_embeddings()`` (never a list of architecture names), so
architectures spladekit has never seen work as long as they implement the standard transformers API.
Tying is detected by shared storage with ``get_input_embeddings()``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from spladekit.common.devices import resolve_device
from spladekit.common.errors import InputError, SpladekitError
from spladekit.common.lines import error_reason, expect, first_line, read_json, reading
from spladekit.common.sources import fetching, is_local_model
from spladekit.model.foreign import resolve_model_folder

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")
JSON_OBJECT_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


class RemoteCodeRequired(SpladekitError):
    """The model needs its own (remote) code and it was not allowed. ``how`` says how to allow it where the
    user is: ``--trust-remote-code`` on the commands that have it; callers whose users set it elsewhere (a
    training config, a sweep file) re-word it with :func:`remote_code_hint`."""

    def __init__(self, source: str, how: str = "pass --trust-remote-code (trust_remote_code=True)"):
        self.source = source
        super().__init__(f"{source}: this model needs its own (remote) code; {how} if you trust it")


@contextlib.contextmanager
def remote_code_hint(how: str) -> Iterator[None]:
    """Inside this block, a :class:`RemoteCodeRequired` says ``how`` instead of naming a command-line option
    the running command may not have."""
    try:
        yield
    except RemoteCodeRequired as error:
        raise RemoteCodeRequired(error.source, how) from None


@dataclass
class Backbone:
    """A masked-LM model, its tokenizer, where it came from, and what was freshly initialized."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str
    fresh_keys: list[str] = field(default_factory=list)
    settings: dict = field(
        default_factory=dict
    )  # read from a foreign folder (spladekit.model.foreign), e.g. max_length


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No transformers warnings tables or progress bars (loading/saving): spladekit reports in one line."""
    import transformers

    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(previous)
        transformers.utils.logging.enable_progress_bar()


def check_model_folder(path: Path) -> None:
    """A local model folder, checked before transformers reads it: ``config.json`` is a JSON object and every
    weight file is intact (safetensors headers cover their files; a sharded checkpoint's index names files
    that exist). A problem is an :class:`InputError` naming the file."""
    if not path.exists():
        raise SpladekitError(f"{path}: no such model folder (and not a hub id)")
    if not path.is_dir():
        raise SpladekitError(f"{path}: a model must be a folder (config.json + weights), not a file")
    if not (path / "config.json").is_file():
        raise SpladekitError(f"{path}: no config.json: not a transformers model folder")
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise SpladekitError(f"{path}: no model weights (*.safetensors or pytorch_model.bin) in the folder")
    for json_file in sorted(path.glob("*.json")):  # config, tokenizer files…: syntax, and objects where required
        read_json(json_file, dict if json_file.name in JSON_OBJECT_FILES else None)
    for index_file in sorted(path.glob("*.index.json")):  # sharded checkpoints
        weight_map = expect(read_json(index_file, dict).get("weight_map"), dict, "'weight_map'", index_file)
        for shard in dict.fromkeys(weight_map.values()):
            expect(shard, str, "a 'weight_map' value", index_file)
            if not (path / shard).is_file():
                raise InputError(f"names the shard {shard!r}, which is not in the folder", index_file)
    for weights in sorted(path.glob("*.safetensors")):
        check_safetensors(weights)


def check_safetensors(path: Path) -> None:
    """Parse the header of a safetensors file (no tensor is read): a truncated, empty or garbled file is an
    :class:`InputError` naming it (safetensors checks that the header's tensors cover the file exactly)."""
    from safetensors import SafetensorError, safe_open

    with reading(path, "safetensors weights", SafetensorError), safe_open(str(path), framework="pt") as handle:
        handle.keys()


def load_config(folder: Path, trust_remote_code: bool) -> PretrainedConfig:
    """The transformers config of a local folder; a value of the wrong type (``"hidden_size": "abc"``), an
    unknown ``model_type``… is an :class:`InputError` naming ``config.json``. Remote code stays the
    caller's decision (its ValueError passes through)."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" in str(error):
            raise
        raise InputError(f"invalid model config ({first_line(error)})", folder / "config.json") from None
    except (TypeError, KeyError, OSError, StrictDataclassError) as error:
        raise InputError(f"invalid model config ({first_line(error)})", folder / "config.json") from None


def load_backbone(path_or_id: str | Path, trust_remote_code: bool = False, device: str | None = None) -> Backbone:
    """Load ``AutoModelForMaskedLM`` + ``AutoTokenizer`` from a local folder or a hub id.

    A local folder is checked first (:func:`check_model_folder`, :func:`load_config`); whatever transformers
    still cannot read (a damaged ``pytorch_model.bin``, weights of the wrong shapes, a broken tokenizer) is a
    :class:`SpladekitError` naming the folder and the library's exception, never a traceback. A hub id that is
    not cached and cannot be downloaded is one :class:`InputError` line (:func:`spladekit.common.sources.fetching`).
    Weights absent from the checkpoint (e.g. the MLM transform of an encoder saved without its head)
    are listed in ``Backbone.fresh_keys`` and logged as a warning: they are random until trained.
    Remote (custom) model code runs only with ``trust_remote_code=True``.
    """
    import pickle  # only for its error type: transformers reads .bin weights with torch.load(weights_only=True)

    from transformers import AutoModelForMaskedLM, AutoTokenizer

    source = str(path_or_id)
    settings: dict = {}
    config = None
    try:
        with quiet_transformers():  # we report the load ourselves, in one line
            if is_local_model(source):
                resolved = resolve_model_folder(Path(source).expanduser())  # sentence-transformers / naver folders
                path, settings = resolved.path, dict(resolved.settings)
                check_model_folder(path)
                source = str(path)
                config = load_config(path, trust_remote_code)
            with fetching(source, "hub", "a local model folder"):
                model, info = AutoModelForMaskedLM.from_pretrained(
                    source, config=config, trust_remote_code=trust_remote_code, output_loading_info=True
                )
                tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except SpladekitError:
        raise
    except ValueError as error:
        if "trust_remote_code" in str(error):
            raise RemoteCodeRequired(source) from None
        raise SpladekitError(f"{source}: cannot load as a masked-LM model: {first_line(error)}") from None
    except OSError as error:
        raise SpladekitError(f"{source}: cannot load model: {first_line(error)}") from None
    except pickle.UnpicklingError:  # its message suggests weights_only=False: never, for a file we cannot trust
        raise SpladekitError(
            f"{source}: cannot load model: a pytorch_model*.bin file is damaged or holds more than "
            "tensors (torch.load(weights_only=True) refused it); use safetensors weights"
        ) from None
    except Exception as error:  # whatever else transformers/tokenizers raise on a damaged folder
        raise SpladekitError(f"{source}: cannot load model ({type(error).__name__}: {error_reason(error)})") from error
    fresh = sorted(info.get("missing_keys", []))
    if fresh:
        log.warning(
            "%s: %d weight(s) not in the checkpoint, freshly initialized: %s", source, len(fresh), ", ".join(fresh)
        )
    model.eval()
    if device is not None:
        model.to(resolve_device(device))
    MLMHead.of(model)  # fail now, not at encode time, if there is no usable projection
    return Backbone(model=model, tokenizer=tokenizer, source=source, fresh_keys=fresh, settings=settings)


def position_limit(model: PreTrainedModel) -> int | None:
    """The most tokens ``model`` takes: the rows of its absolute position table, less the offset a RoBERTa-style
    table starts after (``padding_idx + 1``), else ``config.max_position_embeddings`` (rotary models); None when
    neither is known."""
    for name, module in model.named_modules():
        if name.endswith("position_embeddings") and isinstance(module, nn.Embedding):
            return module.num_embeddings - (0 if module.padding_idx is None else module.padding_idx + 1)
    value = getattr(model.config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def _projection(model: PreTrainedModel) -> nn.Linear:
    """The module mapping hidden states to vocabulary logits (weight V × H, optional bias V)."""
    projection = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if projection is None or not isinstance(getattr(projection, "weight", None), torch.Tensor):
        raise SpladekitError(
            f"{type(model).__name__} exposes no vocabulary projection through get_output_embeddings(); "
            "SPLADE needs a masked-LM head"
        )
    if projection.weight.dim() != 2:
        raise SpladekitError(f"{type(model).__name__}: vocabulary projection weight is not a matrix")
    return projection


@dataclass(frozen=True)
class MLMHead:
    """A model's masked-LM head, found once by :meth:`of` (through ``get_output_embeddings()``, so it works for
    architectures spladekit has never seen) and handed to diagnosis, rescaling and the norms.

    ``projection`` maps hidden states to vocabulary logits (``weight`` V × H, ``bias`` V or None); ``path`` is
    its dotted name in ``model`` (``cls.predictions.decoder``, found when asked for); ``input_embeddings`` is the
    table it may share its weight with. ``tied`` is read live: an ``untie`` rescaling gives the projection a
    weight of its own.
    """

    model: PreTrainedModel
    projection: nn.Linear
    input_embeddings: nn.Embedding

    @classmethod
    def of(cls, model: PreTrainedModel) -> MLMHead:
        # typed nn.Module by transformers; a masked LM's input embeddings are a table with a .weight
        return cls(model, _projection(model), cast(nn.Embedding, model.get_input_embeddings()))

    @property
    def path(self) -> str:
        return next(name for name, module in self.model.named_modules() if module is self.projection)

    @property
    def weight(self) -> torch.Tensor:
        return self.projection.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.projection.bias

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    @property
    def tied(self) -> bool:
        """True while the projection shares storage with the input embeddings."""
        inputs, out = self.input_embeddings.weight, self.weight
        return inputs is out or inputs.data_ptr() == out.data_ptr()

    @property
    def transform_norm(self) -> nn.LayerNorm | None:
        """The LayerNorm that ends the MLM transform (the last one outside the encoder, ``base_model_prefix``):
        its gain and shift scale every logit's ``h · W_v`` term; None for a head without one."""
        prefix = f"{self.model.base_model_prefix}."
        norms = [
            module
            for name, module in self.model.named_modules()
            if isinstance(module, nn.LayerNorm) and not name.startswith(prefix)
        ]
        return norms[-1] if norms else None


@contextlib.contextmanager
def projection_bypassed(model: PreTrainedModel) -> Iterator[nn.Linear]:
    """Within the block, ``model(...).logits`` are the projection's *inputs* h (B × L × H).

    This lets the SPLADE pooling apply the projection itself (fused, chunked) instead of the model
    materializing the B × L × V logits tensor.
    """
    path = MLMHead.of(model).path
    parent_name, _, attribute = path.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    projection = getattr(parent, attribute)
    setattr(parent, attribute, nn.Identity())
    try:
        yield projection
    finally:
        setattr(parent, attribute, projection)
