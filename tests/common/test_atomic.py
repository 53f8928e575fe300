"""spladekit.common.atomic: outputs checked and locked before the work, swapped in complete, one writer each."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap

import pytest

from spladekit.common.atomic import (
    OUTPUT_MARK,
    OutputBusy,
    atomic_directory,
    atomic_file,
    check_new_output,
    final_path,
    mark_output,
    open_in_place,
    open_output,
)
from spladekit.common.errors import SpladekitError
from spladekit.evaluation.run import Run
from spladekit.vectors.artifact import Vectors

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def hidden(folder):
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


@pytest.fixture
def umask_002():
    previous = os.umask(0o002)
    yield
    os.umask(previous)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


# ------------------------------------------------------------------------------------------ umask
def test_files_and_folders_get_the_permissions_the_umask_gives(tmp_path, umask_002):
    Run({"q": {"d": 1.0}}).write(tmp_path / "run.trec")  # atomic_file (was 0600 from mkstemp)
    with atomic_directory(tmp_path / "folder") as staging:  # was 0700 from mkdtemp
        (staging / "x").write_text("x")
    with open_output(tmp_path / "out.json", folder=False) as output:
        output.staging.write_text("{}")
    assert mode(tmp_path / "run.trec") == 0o664
    assert mode(tmp_path / "folder") == 0o775
    assert mode(tmp_path / "out.json") == 0o664


# ------------------------------------------------------------------------------------------ checks first
def test_existing_output_refused_before_the_work_and_kept(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("keep")
    (tmp_path / "file.trec").write_text("keep")
    for target, folder in ((tmp_path / "out", True), (tmp_path / "file.trec", False)):
        with pytest.raises(SpladekitError, match="already exists"):
            open_output(target, folder=folder)
    assert (tmp_path / "out" / "keep").read_text() == "keep" and (tmp_path / "file.trec").read_text() == "keep"
    assert hidden(tmp_path) == []
    (tmp_path / "empty").mkdir()
    with open_output(tmp_path / "empty", folder=True) as output:  # an empty folder is not an output yet
        (output.staging / "x").write_text("x")
    assert (tmp_path / "empty" / "x").is_file()


def test_file_where_a_folder_goes_and_the_reverse_refused_even_with_overwrite(tmp_path):
    (tmp_path / "a-file").write_text("keep")
    (tmp_path / "a-folder").mkdir()
    with pytest.raises(SpladekitError, match="a file is in the way"):
        open_output(tmp_path / "a-file", folder=True, overwrite=True)
    with pytest.raises(SpladekitError, match="is a folder"):
        open_output(tmp_path / "a-folder", folder=False, overwrite=True)
    with pytest.raises(SpladekitError, match="a parent is a file"):
        open_output(tmp_path / "a-file" / "sub" / "out", folder=True)
    assert (tmp_path / "a-file").read_text() == "keep"
    assert hidden(tmp_path) == []


@pytest.mark.skipif(ROOT, reason="root writes into read-only folders")
def test_read_only_parent_fails_at_open(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        for folder in (True, False):
            with pytest.raises(SpladekitError, match="permission denied"):
                open_output(tmp_path / "ro" / "sub" / "out", folder=folder)
        assert list((tmp_path / "ro").iterdir()) == []
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_parents_created_for_an_output_are_removed_when_it_is_discarded(tmp_path):
    with pytest.raises(ValueError), open_output(tmp_path / "a" / "b" / "out", folder=True) as output:
        assert output.staging.is_dir()
        raise ValueError("the work failed")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ only its own folders
def test_overwrite_replaces_only_a_folder_spladekit_wrote(tmp_path):
    """--overwrite on the user's own folder (a typo, ``--output ~/Documents``) deletes nothing: refused before the
    work, one line; a folder spladekit committed carries its mark and is replaced."""
    theirs = tmp_path / "Documents"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    with pytest.raises(SpladekitError, match="not a folder spladekit wrote") as refused:
        open_output(theirs, folder=True, overwrite=True)
    assert "\n" not in str(refused.value) and "--overwrite" in str(refused.value)
    with pytest.raises(SpladekitError, match="not a folder spladekit wrote"):
        check_new_output(theirs, overwrite=True, folder=True)
    assert [p.name for p in theirs.iterdir()] == ["thesis.tex"] and hidden(tmp_path) == []
    with atomic_directory(tmp_path / "index") as staging:
        (staging / "postings").write_text("v1")
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [OUTPUT_MARK, "postings"]
    with atomic_directory(tmp_path / "index", overwrite=True) as staging:
        (staging / "postings").write_text("v2")
    assert (tmp_path / "index" / "postings").read_text() == "v2" and hidden(tmp_path) == []


def test_a_folder_swapped_for_the_users_own_before_the_commit_is_not_replaced(tmp_path):
    target = tmp_path / "index"
    with atomic_directory(target) as staging:
        (staging / "postings").write_text("v1")
    with (
        pytest.raises(SpladekitError, match="created by someone else"),
        open_output(target, folder=True, overwrite=True) as output,
    ):
        (output.staging / "postings").write_text("v2")
        os.rename(target, tmp_path / "moved")
        target.mkdir()
        (target / "theirs").write_text("theirs")
    assert [p.name for p in target.iterdir()] == ["theirs"] and hidden(tmp_path) == []


@pytest.mark.parametrize("name", [".", "..", "./", "../here/.."])
@pytest.mark.parametrize("overwrite", [False, True])
def test_the_working_folder_or_one_holding_it_is_never_an_output(tmp_path, monkeypatch, name, overwrite):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")  # empty: an empty folder would otherwise be taken
    for folder in (True, False):
        with pytest.raises(SpladekitError, match="working folder"):
            open_output(name, folder=folder, overwrite=overwrite)
    with pytest.raises(SpladekitError, match="working folder"):
        open_in_place(name).__enter__()
    assert [p.name for p in tmp_path.iterdir()] == ["here"] and list((tmp_path / "here").iterdir()) == []


# ------------------------------------------------------------------------------------------ commit
def test_overwrite_deletes_nothing_until_the_new_output_is_complete(tmp_path):
    target = tmp_path / "vectors"
    with atomic_directory(target) as staging:
        (staging / "old").write_text("old")
    with pytest.raises(ValueError), open_output(target, folder=True, overwrite=True) as output:
        (output.staging / "new").write_text("half")
        assert (target / "old").read_text() == "old"
        raise ValueError("the work failed")
    assert sorted(p.name for p in target.iterdir()) == [OUTPUT_MARK, "old"]
    with open_output(target, folder=True, overwrite=True) as output:
        (output.staging / "new").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == [OUTPUT_MARK, "new"] and hidden(tmp_path) == []


def test_commit_refuses_a_target_created_meanwhile(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(SpladekitError, match="created by someone else"), atomic_directory(target) as staging:
        (staging / "mine").write_text("mine")
        target.mkdir()
        (target / "theirs").write_text("theirs")
    assert [p.name for p in target.iterdir()] == ["theirs"]
    with (
        pytest.raises(SpladekitError, match="created by someone else"),
        open_output(tmp_path / "run.trec", folder=False) as output,
    ):
        output.staging.write_text("mine")
        (tmp_path / "run.trec").write_text("theirs")
    assert (tmp_path / "run.trec").read_text() == "theirs"
    assert hidden(tmp_path) == []


def test_save_functions_write_into_an_open_output(tmp_path):
    import numpy as np
    import scipy.sparse as sp

    with (
        open_output(tmp_path / "vectors", folder=True) as folder,
        open_output(tmp_path / "run.trec", folder=False) as run_file,
    ):
        Vectors(sp.csr_matrix(np.eye(2, dtype=np.float32)), ["a", "b"]).save(folder.staging)
        Run({"q": {"a": 1.0}}).write(run_file.staging)
        with atomic_file(folder.staging / "extra.txt") as stream:
            stream.write("x")
        assert final_path(folder.staging / "extra.txt") == tmp_path / "vectors" / "extra.txt"
        assert not (tmp_path / "vectors").exists() and not (tmp_path / "run.trec").exists()
    assert Vectors.load(tmp_path / "vectors").ids == ["a", "b"]
    assert (tmp_path / "run.trec").read_text().startswith("q Q0 a 1")
    assert hidden(tmp_path) == []


# ------------------------------------------------------------------------------------------ one writer
HOLDER = textwrap.dedent("""
    import sys
    from spladekit.common.atomic import open_output
    output = open_output(sys.argv[1], folder=True)
    (output.staging / "half").write_text("half")
    print("ready", flush=True)
    sys.stdin.readline()
""")


def hold_in_another_process(target):
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def test_a_second_writer_fails_at_once_and_kill_9_blocks_nothing(tmp_path):
    target = tmp_path / "vectors"
    holder = hold_in_another_process(target)
    try:
        with pytest.raises(OutputBusy, match=rf"another process \(pid {holder.pid}\) is writing this output"):
            open_output(target, folder=True)
        with pytest.raises(OutputBusy), atomic_directory(target, overwrite=True):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert hidden(tmp_path) == [".vectors.lock", ".vectors.partial"]  # what kill -9 leaves
    with atomic_directory(target) as staging:
        assert list(staging.iterdir()) == []  # the stale staging was cleared
        (staging / "done").write_text("done")
    assert sorted(p.name for p in target.iterdir()) == [OUTPUT_MARK, "done"] and hidden(tmp_path) == []


def test_in_place_output_is_locked_and_put_back_when_the_new_run_fails(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "model").write_text("old")
    with open_in_place(run) as place, pytest.raises(SpladekitError, match="not a folder spladekit wrote"):
        place.set_aside()  # the user's folder: never moved aside to be deleted
    mark_output(run)  # as a run spladekit started marks its folder
    with pytest.raises(RuntimeError), open_in_place(run) as place:
        with pytest.raises(OutputBusy):
            open_output(run, folder=True, overwrite=True)
        assert (run / "model").read_text() == "old"
        place.set_aside()
        run.mkdir()
        (run / "model").write_text("new, unfinished")
        raise RuntimeError("training failed")
    assert (run / "model").read_text() == "old" and hidden(tmp_path) == []
    with open_in_place(run) as place:
        place.set_aside()
        run.mkdir()
        (run / "model").write_text("new")
    assert (run / "model").read_text() == "new" and hidden(tmp_path) == []


def test_disk_full_while_writing_is_one_clear_error_and_leaves_nothing(tmp_path):
    import errno

    for opened in (atomic_directory(tmp_path / "folder"), atomic_file(tmp_path / "file.json")):
        with pytest.raises(SpladekitError, match="no space left on device"), opened:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "somewhere"))
    assert list(tmp_path.iterdir()) == []


def _open_under_a_new_parent(root, index, rounds, barrier, errors):
    for round_ in range(rounds):
        barrier.wait()
        try:
            output = open_output(root / str(round_) / "a" / "b" / f"out{index}", folder=True)
            if index % 2:
                output.discard()  # removes the parents it made, if empty, while the others are still opening
            else:
                output.commit()
        except Exception as error:
            errors.put(f"round {round_}, writer {index}: {error}")


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_writers_creating_and_removing_the_same_new_parents_at_once_all_succeed(tmp_path):
    """Six processes open outputs side by side under parents none has yet, in step, 200 times; half discard theirs
    (removing the parents they made, if empty). Before the fix one in ~40 rounds failed with "a parent is a file"."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    writers, rounds = 6, 200
    barrier, errors = context.Barrier(writers), context.Queue()
    processes = [
        context.Process(target=_open_under_a_new_parent, args=(tmp_path, index, rounds, barrier, errors))
        for index in range(writers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == [] and [process.exitcode for process in processes] == [0] * writers
    assert sorted(path.name for path in (tmp_path / "0" / "a" / "b").iterdir()) == ["out0", "out2", "out4"]
