"""Scratch folders: the private working space of one run (an engine's own files, a CIFF export's buckets, a copy of
the collection for Anserini), gone when the run ends, whatever way it ends.

``scratch_folder(what, where=None) -> Scratch``
    A new folder ``spladekit-WHAT-PID-RANDOM`` in the temporary directory (``tempfile.gettempdir()``: ``$TMPDIR``),
    or ``.spladekit-WHAT-PID-RANDOM`` in the folder ``where`` (scratch that must be on an output's file system).
    ``Scratch.path`` is the folder; ``cleanup()``, leaving its ``with`` block (normally or by an exception, Ctrl-C
    included) or the interpreter's exit removes it. Mode ``0o700``: it may hold a copy of the user's data.

**After kill -9** (or SIGTERM, which spladekit does not catch, or a power cut) nothing runs, and scratch can be
gigabytes. So every ``scratch_folder`` call first sweeps the folder it creates in: a scratch folder is removed
when its owner record (:data:`OWNER_FILE`, written first thing: pid, host, boot) says it was made on this machine
and the run that made it is over: made before the last boot, or its pid is no process now (``os.kill(pid, 0)``
raises ProcessLookupError). Never swept: a live process's (any user's), one made on another host (a shared file
system: its pid means nothing here), one whose record is missing or unreadable (not provably ours: a user's folder
that happens to match the name, or a folder between its creation and its record). A reused pid only delays a sweep.
On systems without POSIX signals nothing is swept (``os.kill(pid, 0)`` would not be a probe there).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import weakref
from pathlib import Path
from types import TracebackType

from spladekit.common.errors import SpladekitError

OWNER_FILE = ".spladekit-scratch"
_NAME = re.compile(r"\.?spladekit-[a-z][a-z0-9-]*-(?P<pid>\d+)-[a-z0-9_]{8}")
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class Scratch:
    """A scratch folder (see the module): ``path``; removed by ``cleanup()``, its ``with`` block or interpreter exit."""

    def __init__(self, path: Path):
        self.path = path
        self._remove = weakref.finalize(self, shutil.rmtree, str(path), ignore_errors=True)

    def cleanup(self) -> None:
        """Remove the folder (once; later calls do nothing)."""
        self._remove()

    def __enter__(self) -> Path:
        return self.path

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.cleanup()


def scratch_folder(what: str, where: str | Path | None = None) -> Scratch:
    """A new scratch folder for ``what`` (a short lower-case name: the engine or export), in ``where`` or the temporary
    directory, after sweeping what finished runs left there (see the module)."""
    hidden = where is not None
    where = Path(tempfile.gettempdir() if where is None else where)
    sweep(where)
    while True:
        path = where / f"{'.' if hidden else ''}spladekit-{what}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
        except OSError as error:
            raise _cannot_make(where, error, hidden) from None
    scratch = Scratch(path)
    try:
        (path / OWNER_FILE).write_text(json.dumps(owner_record(os.getpid())) + "\n", encoding="utf-8")
    except BaseException as error:
        scratch.cleanup()
        if isinstance(error, OSError):
            raise _cannot_make(where, error, hidden) from None
        raise
    return scratch


def _cannot_make(where: Path, error: OSError, chosen: bool) -> SpladekitError:
    hint = "" if chosen else " (TMPDIR chooses another place)"
    return SpladekitError(f"{where}: cannot make a scratch folder here: {error.strerror or error}{hint}")


def owner_record(pid: int) -> dict[str, object]:
    """What a scratch folder records of the run that made it: enough to tell, later, that the run is over."""
    return {"pid": pid, "host": socket.gethostname(), "boot": _boot()}


def sweep(where: Path) -> None:
    """Remove the scratch folders in ``where`` whose runs are over (see the module); errors are ignored (a folder
    another sweep removed meanwhile, one that is not ours to remove)."""
    if os.name != "posix":
        return
    try:
        entries = list(os.scandir(where))
    except OSError:
        return
    for entry in entries:
        found = _NAME.fullmatch(entry.name)
        if found and entry.is_dir(follow_symlinks=False) and _over(Path(entry.path), int(found["pid"])):
            shutil.rmtree(entry.path, ignore_errors=True)


def _over(folder: Path, pid: int) -> bool:
    """Whether the run that made ``folder`` (its name says ``pid``) is provably over (see the module)."""
    try:
        record = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("pid") != pid or record.get("host") != socket.gethostname():
        return False
    boot = _boot()
    if boot and record.get("boot") and record["boot"] != boot:
        return True
    return not _alive(pid)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process
        return True
    return True


def _boot() -> str:
    """This boot's id (Linux); empty where there is none."""
    try:
        return _BOOT_ID.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
