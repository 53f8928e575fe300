"""The public API (``spladekit/__init__.py``): every name resolves, and none can be hidden by a subpackage.

Importing ``spladekit.X.y`` binds the attribute ``X`` on the package ``spladekit``; a public function named like a
subpackage (``train`` beside the package ``train/``, as before 0.2) was then the module, not the function, and
``spladekit.train(config, out)`` raised "'module' object is not callable"."""

import pkgutil
import subprocess
import sys

import spladekit


def test_no_public_name_is_a_subpackage():
    subpackages = {module.name for module in pkgutil.iter_modules(spladekit.__path__) if module.ispkg}
    assert subpackages, "no subpackages found: the test would pass on an empty package"
    assert not subpackages & set(spladekit.__all__), subpackages & set(spladekit.__all__)


def test_every_public_name_resolves_to_its_declared_object():
    for name in spladekit.__all__:
        value = getattr(spladekit, name)
        assert value is not None
        if name in spladekit._LAZY:  # the object itself, from the module the table names
            assert getattr(value, "__module__", None) == spladekit._LAZY[name] or name in {"build_index", "load_index"}


def test_train_is_callable_after_every_other_public_name_is_touched():
    """In a fresh interpreter (this process may already hold the names): touch every public name, import every
    subpackage, then ``spladekit.train`` must still be the function."""
    code = (
        "import importlib, pkgutil, spladekit\n"
        "[getattr(spladekit, n) for n in spladekit.__all__ if n != 'train']\n"
        "packages = [m.name for m in pkgutil.iter_modules(spladekit.__path__) if m.ispkg]\n"
        "[importlib.import_module('spladekit.' + name) for name in packages]\n"
        "import spladekit.training.config\n"
        "assert callable(spladekit.train), type(spladekit.train)\n"
        "assert spladekit.train.__module__ == 'spladekit.training.loop', spladekit.train.__module__\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
