"""Outputs: checked and locked before the work, complete under their final name or absent, one writer each.

Every file and folder spladekit writes goes through this module. For an output ``NAME`` it uses three
hidden siblings: ``.NAME.lock`` (the lock), ``.NAME.partial`` (the staging folder or file) and
``.NAME.old`` (a replaced output, kept until its replacement is complete).

``open_output(target, folder=True|False, overwrite=False) -> Output``
    Call it *before* the work. It refuses an existing output unless ``overwrite`` (an empty folder is not
    one), and a file where a folder goes or the reverse (always); creates the missing parent folders;
    takes the output's lock; and creates the staging folder/file. So an unwritable location, a file as
    parent, a read-only folder or a second writer fail at once, as one :class:`SpladekitError`.
    Write into ``Output.staging``; ``commit()`` (or leaving its ``with`` block normally) moves it into
    place, after checking again that no one else created the target meanwhile; with ``overwrite`` the
    old output is deleted only once the new one is in place. ``discard()`` (or an exception in the
    ``with`` block) removes the staging and the parent folders ``open_output`` created.
``atomic_directory(target, overwrite=False)``
    ``open_output`` + commit in one ``with`` block that yields the staging folder.
``atomic_file(target, mode="w")``
    A ``with`` block that yields an open staging file, renamed onto ``target`` if the block succeeds. No
    lock and no existence check: it is for files inside an output this process already holds (a run's
    metrics, a sweep's report) and replaces an existing file.
``open_in_place(target) -> InPlace``
    For an output written in place so that it can be resumed (a training run): the lock for the whole
    ``with`` block, plus ``InPlace.set_aside()`` to move an existing output to ``.NAME.old`` once the new
    run is ready to start; it is deleted when the block succeeds and put back when it fails.
``final_path(path)``
    Where a path inside an open output's staging will be after the commit (for paths written into files).

**Writing into an open output.** ``open_output``, ``atomic_directory`` and ``atomic_file`` given the
staging path of an output that this process has open write straight into it (its opener commits). The
save functions (``Vectors.save``, ``SparseEncoder.save``, ``Searcher.save``, ``Run.write``,
``EvaluationResult.save``, the exporters) therefore write into an output opened earlier when they are
given ``output.staging``; the CLI opens its outputs first, computes, then saves there.

**One writer per output.** The lock is ``flock`` on ``.NAME.lock``: a second writer gets
:class:`OutputBusy` at once. The OS releases it when the process dies, so ``kill -9`` leaves nothing that
blocks a rerun (a stale ``.NAME.partial`` is removed, a stale ``.NAME.old`` put back or removed, by the
next writer). The holder deletes the lock file when it is done. Without ``fcntl`` (not POSIX) outputs are
still staged and swapped, but not locked.

**Only its own folders.** A folder a user names may hold anything (``--output ~/Documents``, ``-o .``), so
spladekit writes a folder output only as a new folder (its staging, swapped in; an existing *empty* folder is taken),
never among files already there, and replaces or deletes an existing one only if it wrote it: every folder output
carries the mark :data:`OUTPUT_MARK` (a small file written into the staging at the commit, or by
:func:`mark_output` into a folder written in place when it is created), and ``overwrite`` (``--overwrite``,
``--recreate``) on a non-empty folder without it is refused before the work, as one line, and again at the commit
(the folder may have been swapped meanwhile). Outputs of a spladekit from before the mark are therefore not
replaced either: remove them by hand. The working folder, or a folder holding it, is never an output at all.

**Permissions.** Files are created ``0o666`` and folders ``0o777``, less the umask, as ``open`` and
``mkdir`` do (not the ``0o600`` / ``0o700`` of ``tempfile``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

try:
    import fcntl
except ImportError:  # not POSIX: outputs are staged and swapped but not locked
    fcntl = None  # type: ignore[assignment]

from spladekit.common.errors import SpladekitError

LOCK, STAGING, OLD = ".lock", ".partial", ".old"
OUTPUT_MARK = ".spladekit-output"  # in every folder output: spladekit wrote this folder, --overwrite may replace it
_MARK_TEXT = "spladekit wrote this folder: spladekit --overwrite (or --recreate) may replace it as a whole.\n"

_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOTDIR: "a parent is a file, not a folder",
    errno.EEXIST: "a file is in the way",
    errno.ENAMETOOLONG: "name too long",
}
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_PARENT_RETRIES = 20  # a folder made and removed again by other writers this many times running is not a race

_open_outputs: dict[Path, Output] = {}  # staging path (absolute) → the output that owns it


class OutputBusy(SpladekitError):
    """Another writer holds the output's lock."""


# ------------------------------------------------------------------------------------------ helpers
def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}{suffix}")


def _cannot_write(shown: str | Path, error: OSError) -> SpladekitError:
    """One clear line for an OSError met while creating or writing an output."""
    reason = _REASONS.get(error.errno or 0, error.strerror or str(error))
    where = (
        f" ({error.filename})"
        if error.filename and str(error.filename) not in (str(shown), str(_absolute(shown)))
        else ""
    )
    return SpladekitError(f"{shown}: cannot write here: {reason}{where}")


def _is_dir(path: Path) -> bool:
    return os.path.isdir(path)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _non_empty_dir(path: Path) -> bool:
    return _is_dir(path) and any(os.scandir(path))


def _remove(path: Path) -> None:
    if _is_dir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created, outermost first. Safe against other processes making
    (or removing) the same folders at once: each path is looked at once, and one made meanwhile is not ours."""
    missing = []
    while folder.parent != folder:
        try:
            if stat.S_ISDIR(os.stat(folder).st_mode):
                break
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
        except FileNotFoundError:
            missing.append(folder)
            folder = folder.parent
    created = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            if not _is_dir(path):
                raise
            continue  # made meanwhile by someone else: not ours to remove
        created.append(path)
    return created


def _remove_empty(folders: list[Path]) -> None:
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _create_file(path: Path) -> int:
    """Create ``path`` exclusively, ``0o666`` less the umask; return its descriptor."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)


def mark_output(folder: str | Path) -> None:
    """Mark ``folder``, which spladekit created (or took empty) for an output it writes in place, as its own (see
    the module); an existing mark is kept. Outputs opened with :func:`open_output` are marked at the commit."""
    try:
        descriptor = os.open(
            Path(folder) / OUTPUT_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666
        )
    except FileExistsError:
        return
    except OSError as error:
        raise _cannot_write(folder, error) from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(_MARK_TEXT)


def _ours(folder: Path) -> bool:
    return os.path.isfile(folder / OUTPUT_MARK)


def _not_ours(shown: str | Path, option: str) -> SpladekitError:
    return SpladekitError(
        f"{shown}: not a folder spladekit wrote (no {OUTPUT_MARK} in it), so {option} does not replace it; "
        "choose another path (or move it away yourself)"
    )


def _check_not_working_folder(shown: str | Path) -> None:
    """The working folder, or one holding it, is never an output: swapping it or deleting it pulls the ground from
    under the user's shell (``--output .``, ``--output ..``)."""
    try:
        target, here = os.path.realpath(shown), os.path.realpath(os.getcwd())
    except OSError:  # no working folder (removed under the process): nothing to protect
        return
    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
        raise SpladekitError(
            f"{shown}: the working folder (or a folder holding it) cannot be an output; name a new folder"
        )


def check_new_output(
    target: str | Path, overwrite: bool = False, folder: bool | None = None, option: str = "--overwrite"
) -> None:
    """Refuse an existing output unless ``overwrite`` (an empty folder is not one), and even then a non-empty folder
    that spladekit did not write (see the module); with ``folder`` given, refuse a file where a folder goes or a
    folder where a file goes, ``overwrite`` or not; refuse the working folder. ``option``: the flag named in the
    errors. No side effects."""
    shown = target
    target = _absolute(target)
    _check_not_working_folder(shown)
    try:
        if folder is True and _exists(target) and not _is_dir(target):
            raise SpladekitError(f"{shown}: a file is in the way (this output is a folder)")
        if folder is False and _is_dir(target):
            raise SpladekitError(f"{shown}: is a folder (this output is a file)")
        if _exists(target) and (not _is_dir(target) or _non_empty_dir(target)):
            if not overwrite:
                raise SpladekitError(f"{shown}: output already exists (choose another path or pass {option})")
            if _is_dir(target) and not _ours(target):
                raise _not_ours(shown, option)
    except OSError as error:
        raise _cannot_write(shown, error) from None


# ------------------------------------------------------------------------------------------ the lock
class _Lock:
    """``flock`` on ``.NAME.lock``, non-blocking. The holder unlinks the file before releasing it; an
    acquirer checks that the file it locked is still the one at the path (else it locked a released,
    unlinked one, and tries again)."""

    def __init__(self, target: Path, shown: str | Path):
        self.path = _sibling(target, LOCK)
        self.shown = shown
        self.fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None:
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputBusy(
                        f"{self.shown}: another process{f' (pid {holder})' if holder.isdigit() else ''} "
                        f"is writing this output; wait for it to finish or choose another path"
                    ) from None
                raise
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # while still held: see acquire
        os.close(self.fd)
        self.fd = None


def _lock(target: Path, shown: str | Path) -> tuple[_Lock, list[Path]]:
    """Create the parent folders and take the lock; any failure is one SpladekitError, nothing left behind."""
    created: list[Path] = []
    try:
        for attempt in range(_PARENT_RETRIES):
            created = _make_parents(target.parent)
            lock = _Lock(target, shown)
            try:
                lock.acquire()
                break
            except FileNotFoundError:  # another writer removed the empty parents it had made: make them again
                if attempt == _PARENT_RETRIES - 1:
                    raise
    except OSError as error:
        _remove_empty(created)
        raise _cannot_write(shown, error) from None
    except BaseException:
        _remove_empty(created)
        raise
    return lock, created


# ------------------------------------------------------------------------------------------ staged outputs
class Output:
    """An output opened by :func:`open_output`: locked, staging created; ``commit()`` or ``discard()``."""

    def __init__(
        self,
        target: Path,
        shown: str | Path,
        folder: bool,
        overwrite: bool,
        lock: _Lock | None,
        created: list[Path],
        staging: Path,
    ):
        self.target = Path(shown)  # as given (relative paths stay relative)
        self.folder = folder
        self.overwrite = overwrite
        self._absolute = target
        self._lock = lock
        self._created = created
        self._staging = staging
        self._owner = lock is not None  # else: the staging of an enclosing output, committed by its opener
        self._done = False

    @property
    def staging(self) -> Path:
        """The folder or file to write into (empty at first)."""
        return self._staging

    def commit(self) -> Path:
        """Move the staging into place (checking again for a target created meanwhile); return the target."""
        if self._done or not self._owner:
            self._done = True
            return self.target
        try:
            self._move_into_place()
        except OSError as error:
            self.discard()
            raise _cannot_write(self.target, error) from None
        except BaseException:
            self.discard()
            raise
        self._close()
        return self.target

    def discard(self) -> None:
        """Remove the staging (and the parent folders that opening created); the target is untouched."""
        if self._done or not self._owner:
            self._done = True
            return
        _remove(self._staging)
        self._close()
        _remove_empty(self._created)

    def _close(self) -> None:
        self._done = True
        _open_outputs.pop(self._staging, None)
        if self._lock is not None:
            self._lock.release()

    def _appeared(self) -> SpladekitError:
        return SpladekitError(
            f"{self.target}: created by someone else while this output was being written; "
            "nothing was replaced and the new output was discarded"
        )

    def _move_into_place(self) -> None:
        target, staging = self._absolute, self._staging
        if self.folder:
            mark_output(staging)
            if _exists(target) and not _is_dir(target):
                raise self._appeared()
            if _non_empty_dir(target):
                if not self.overwrite or not _ours(target):  # not ours: swapped for the user's own meanwhile
                    raise self._appeared()
                old = _sibling(target, OLD)
                os.rename(target, old)
                try:
                    os.rename(staging, target)
                except BaseException:
                    os.rename(old, target)
                    raise
                shutil.rmtree(old, ignore_errors=True)
                return
            try:
                os.rename(staging, target)  # onto nothing or an empty folder; a non-empty one refuses
            except OSError as error:
                if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise self._appeared() from None
                raise
            return
        if _is_dir(target):
            raise self._appeared()
        if self.overwrite:
            os.replace(staging, target)
            return
        try:
            os.link(staging, target)  # fails if the target exists: no check-then-replace race
        except FileExistsError:
            raise self._appeared() from None
        except OSError:  # a file system without hard links
            if _exists(target):
                raise self._appeared() from None
            os.replace(staging, target)
            return
        os.unlink(staging)

    def __enter__(self) -> Output:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            self.commit()
            return
        self.discard()
        if isinstance(error, OSError) and error.errno in _DISK_FULL:
            raise _cannot_write(self.target, error) from None


def open_output(target: str | Path, *, folder: bool, overwrite: bool = False, option: str = "--overwrite") -> Output:
    """Check, lock and stage the output ``target`` (a folder, or a file) before any work; see the module.
    ``option``: how the caller's users ask for ``overwrite``, named in the errors."""
    shown = target
    absolute = _absolute(target)
    opened = _open_outputs.get(absolute)
    if opened is not None:  # the staging of an output open in this process: write straight into it
        if opened.folder != folder:
            raise SpladekitError(f"{opened.target}: is a {'folder' if opened.folder else 'file'} output")
        return Output(absolute, shown, folder, overwrite, None, [], absolute)
    if absolute.name in ("", ".", ".."):
        raise SpladekitError(f"{shown}: not a valid output path")
    check_new_output(shown, overwrite, folder, option)
    lock, created = _lock(absolute, shown)
    try:
        _recover(absolute)
        check_new_output(shown, overwrite, folder, option)  # again, under the lock
        staging = _sibling(absolute, STAGING)
        _remove(staging)  # left by a killed writer (we hold the lock: no one else is using it)
        if folder:
            os.mkdir(staging)
        else:
            os.close(_create_file(staging))
    except OSError as error:
        lock.release()
        _remove_empty(created)
        raise _cannot_write(shown, error) from None
    except BaseException:
        lock.release()
        _remove_empty(created)
        raise
    output = Output(absolute, shown, folder, overwrite, lock, created, staging)
    _open_outputs[staging] = output
    return output


def _recover(target: Path) -> None:
    """Under the lock: a ``.NAME.old`` left by a writer killed while swapping goes back if ``NAME`` is
    missing; otherwise ``NAME`` is the newer, complete output and the old one is removed."""
    old = _sibling(target, OLD)
    if not _exists(old):
        return
    if not _exists(target):
        os.rename(old, target)
    else:
        _remove(old)


def build_once(target: Path, complete: Callable[[Path], bool], build: Callable[[Path], None], what: str) -> None:
    """Make the derived folder ``target`` that several processes may need at once (a cache entry, a sweep's shared
    backbone): unless ``complete(target)``, the first process to take its lock calls ``build(staging)``; the others
    wait for it (checking every second) and use what it made. Checked again under the lock, so nothing is built
    twice; a builder that fails leaves nothing, and the next waiter builds."""
    waiting = False
    while not complete(target):
        try:
            output = open_output(target, folder=True, overwrite=True)
        except OutputBusy:
            if not waiting:
                logging.getLogger("spladekit").info("another process is writing %s (%s): waiting for it", what, target)
                waiting = True
            time.sleep(1)
            continue
        with output:
            if complete(target):  # made by another process between the check and the lock
                output.discard()
            else:
                build(output.staging)


@contextlib.contextmanager
def atomic_directory(target: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging folder; on success it replaces ``target`` (see :func:`open_output`), on error it is removed."""
    with open_output(target, folder=True, overwrite=overwrite) as output:
        yield output.staging


@contextlib.contextmanager
def atomic_file(target: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield an open staging file next to ``target``; renamed onto it only if the block succeeds (no lock:
    for files inside an output this process holds; an existing file is replaced)."""
    encoding = None if "b" in mode else "utf-8"
    absolute = _absolute(target)
    opened = _open_outputs.get(absolute)
    if opened is not None and not opened.folder:  # the staging file of an open output: write into it
        with open(absolute, mode, encoding=encoding) as stream:
            yield stream
        return
    staging = _sibling(absolute, f".{os.getpid()}-{secrets.token_hex(4)}{STAGING}")
    try:
        _make_parents(absolute.parent)
        descriptor = _create_file(staging)
    except OSError as error:
        raise _cannot_write(target, error) from None
    try:
        with os.fdopen(descriptor, mode, encoding=encoding) as stream:
            yield stream
        os.replace(staging, absolute)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        if isinstance(error, OSError) and (
            error.errno in _DISK_FULL or error.filename is not None and _absolute(error.filename) in (staging, absolute)
        ):
            raise _cannot_write(target, error) from None
        raise


def final_path(path: str | Path) -> Path:
    """Where ``path`` will be once the open outputs it lies in are committed (``path`` itself if none)."""
    path = Path(path)
    changed = True
    while changed:
        changed = False
        absolute = _absolute(path)
        for staging, output in list(_open_outputs.items()):
            if absolute == staging or staging in absolute.parents:
                path = output.target / absolute.relative_to(staging)
                changed = True
                break
    return path


# ------------------------------------------------------------------------------------------ in place
class InPlace:
    """An output written in place (see :func:`open_in_place`)."""

    def __init__(self, target: str | Path):
        self.target = Path(target)
        self._absolute = _absolute(target)
        self._old = _sibling(self._absolute, OLD)
        self._lock: _Lock | None = None
        self._created: list[Path] = []
        self._moved = False

    def set_aside(self) -> None:
        """Move an existing output to ``.NAME.old`` (call it once the new run is ready to start): deleted
        when the ``with`` block succeeds, put back when it fails. A non-empty folder spladekit did not write is
        refused (see the module)."""
        try:
            if _exists(self._old):  # the run that set it aside was killed: NAME holds its partial files
                _remove(self._absolute)
            elif _exists(self._absolute):
                if _non_empty_dir(self._absolute) and not _ours(self._absolute):
                    raise _not_ours(self.target, "--overwrite")
                os.rename(self._absolute, self._old)
            else:
                return
        except OSError as error:
            raise _cannot_write(self.target, error) from None
        self._moved = True

    @property
    def put_back(self) -> bool:
        """Whether a failure of the ``with`` block will put the previous output back."""
        return self._moved

    def __enter__(self) -> InPlace:
        _check_not_working_folder(self.target)
        self._lock, self._created = _lock(self._absolute, self.target)
        try:
            if _exists(self._old) and not _exists(self._absolute):
                os.rename(self._old, self._absolute)  # killed between setting aside and starting: undo
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                if _exists(self._old):
                    _remove(self._old)  # the new output is complete
            elif self._moved:
                _remove(self._absolute)
                os.rename(self._old, self._absolute)
        finally:
            if self._lock is not None:
                self._lock.release()
            if kind is not None:
                _remove_empty(self._created)  # the parent folders the lock needed, if the run left them empty


def open_in_place(target: str | Path) -> InPlace:
    """The lock of an output written in place (a resumable training run), held for the ``with`` block; a
    second writer gets :class:`OutputBusy`. See :class:`InPlace`."""
    return InPlace(target)
