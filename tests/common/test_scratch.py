"""Scratch folders (an engine's own files, a CIFF export's buckets) after ``kill -9``: what a killed run leaves is
swept by the next run of any engine or export, a live process's is never touched, and every exit path of a run
removes its own (:mod:`spladekit.common.scratch`).

The engines' tests run a real build in a subprocess that is stopped at a point where its scratch folder holds work
(killed there with SIGKILL, or held there alive until the test ends), then a build in this process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

TOKENS = [f"t{v}" for v in range(40)]

# engine or export → (its module, the function it is stopped at: its scratch folder then holds work)
RUNS = {
    "anserini": ("spladekit.index.anserini", "run_anserini"),
    "pisa": ("spladekit.index.pisa", "_Postings.merge"),
    "bmp": ("spladekit.index.bmp", "BmpSearcher.__init__"),  # the index file written
    "qdrant": ("spladekit.index.qdrant", "_Edge.finish"),
    "milvus": ("spladekit.index.milvus", "MilvusSearcher._insert"),
    "ciff": ("spladekit.export.ciff", "_scatter"),  # stopped once its postings are in the bucket files
}

STOPPED_RUN = textwrap.dedent("""
    import importlib, os, signal, sys
    from pathlib import Path
    sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]).parent)]  # this test's folder, then tests/ (the helpers)
    from test_scratch import RUNS, run_once

    run, mode, vectors, out, tag = sys.argv[2:7]
    module_name, stop_at = RUNS[run]
    *path, name = stop_at.split(".")
    owner = importlib.import_module(module_name)
    for part in path:
        owner = getattr(owner, part)
    real = getattr(owner, name)

    def stop(*args, **kwargs):
        if name == "_scatter":
            real(*args, **kwargs)
        if mode == "hold":
            print("holding", flush=True)
            sys.stdin.readline()
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(owner, name, stop)
    run_once(run, Path(vectors), Path(out), tag)
""")


def run_once(run: str, vectors: Path, out: Path, tag: str) -> None:
    """One build of the engine (closed again), or one CIFF export of ``vectors`` to ``out/TAG.ciff``."""
    from spladekit.vectors.artifact import Vectors

    if run == "ciff":
        from spladekit.export.ciff import export_ciff

        export_ciff(vectors, out / f"{tag}.ciff", tokens=TOKENS, show_progress=False)
        return
    from spladekit.index import BACKENDS

    BACKENDS[run].build(Vectors.load(vectors).matrix).close()


def left(folder: Path) -> set[str]:
    """The scratch folders in ``folder`` (today's names, and those of earlier versions)."""
    return {path.name for path in folder.iterdir() if path.name.startswith(("spladekit-", ".spladekit-", ".ciff-"))}


def stopped_run(run: str, mode: str, temp: Path, vectors: Path, out: Path, tag: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", STOPPED_RUN, str(Path(__file__).parent), run, mode, str(vectors), str(out), tag],
        env=os.environ | {"TMPDIR": str(temp)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def available(run: str) -> None:
    """Skip where the engine is not installed."""
    from spladekit.common.errors import SpladekitError

    needs = {"qdrant": "qdrant_edge", "milvus": "pymilvus", "bmp": "bmp", "ciff": "ciff_toolkit"}
    if run in needs:
        pytest.importorskip(needs[run])
    try:
        if run == "pisa":
            from spladekit.index import pisa

            pisa._pisathon()
        if run == "anserini":
            from spladekit.index import anserini

            anserini.find_java(), anserini.find_jar()
    except SpladekitError as missing:
        pytest.skip(str(missing))


@pytest.mark.parametrize("run", RUNS)
def test_a_killed_runs_scratch_is_swept_by_the_next_run_and_a_live_runs_is_kept(run, tmp_path, monkeypatch):
    available(run)
    from spladekit.vectors.artifact import Vectors

    temp, out, vectors = tmp_path / "tmp", tmp_path / "out", tmp_path / "vectors"
    temp.mkdir()
    out.mkdir()
    documents = sp.random(30, 40, density=0.2, format="csr", random_state=0, dtype=np.float32)
    Vectors(documents, [f"d{i}" for i in range(30)], {}).save(vectors)
    where = out if run == "ciff" else temp  # CIFF's scratch goes beside its output (same file system)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    killed = stopped_run(run, "kill", temp, vectors, out, "killed")
    _, errors = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, errors
    stale = left(where)
    assert len(stale) == 1, stale  # what kill -9 leaves: the run's scratch, with its work in it
    assert any(path.is_file() for path in (where / next(iter(stale))).rglob("*"))

    holder = stopped_run(run, "hold", temp, vectors, out, "held")
    try:
        assert holder.stdout.readline().strip() == "holding", holder.stderr.read()
        live = left(where) - stale
        assert len(live) == 1, live
        run_once(run, vectors, out, "next")
        assert left(where) == live  # the dead run's swept, the live run's kept, this run's own removed
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == -signal.SIGKILL

    run_once(run, vectors, out, "again")
    assert left(where) == set()
    if run == "ciff":  # the killed exports' outputs: absent; their reruns work and leave nothing beside them
        assert not (out / "killed.ciff").exists() and not (out / "held.ciff").exists()
        run_once(run, vectors, out, "killed")
        run_once(run, vectors, out, "held")
        assert sorted(path.name for path in out.iterdir()) == ["again.ciff", "held.ciff", "killed.ciff", "next.ciff"]


# ------------------------------------------------------------------------------------------ the mechanism
def dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


def forged(where: Path, pid: int, what: str = "pisa", owner: dict | None = None, hidden: bool = False) -> Path:
    """A scratch folder as a run of ``pid`` makes it (``owner``: override its owner record)."""
    from spladekit.common.scratch import OWNER_FILE, owner_record

    folder = where / f"{'.' if hidden else ''}spladekit-{what}-{pid}-0123abcd"
    folder.mkdir()
    record = owner_record(pid) | (owner or {})
    (folder / OWNER_FILE).write_text(json.dumps(record))
    (folder / "work").write_text("gigabytes")
    return folder


def test_the_folder_is_named_by_its_owner_removed_on_every_exit_and_private(tmp_path):
    from spladekit.common.scratch import scratch_folder

    with scratch_folder("anserini", tmp_path) as folder:
        assert folder.parent == tmp_path and folder.name.startswith(f".spladekit-anserini-{os.getpid()}-")
        assert folder.stat().st_mode & 0o077 == 0  # it may hold a copy of the collection
        (folder / "big").write_text("x")
    assert not folder.exists()
    with pytest.raises(RuntimeError), scratch_folder("ciff", tmp_path) as folder:
        raise RuntimeError
    assert not folder.exists()
    explicit = scratch_folder("pisa", tmp_path)
    explicit.cleanup()
    explicit.cleanup()  # twice: nothing to do
    assert not explicit.path.exists() and list(tmp_path.iterdir()) == []


def test_interpreter_exit_removes_it_and_kill_9_leaves_it_for_the_next_run(tmp_path):
    from spladekit.common.scratch import scratch_folder

    code = "import sys; from spladekit.common.scratch import scratch_folder; s = scratch_folder('bmp', sys.argv[1]); "
    subprocess.run([sys.executable, "-c", code + "print(s.path)", str(tmp_path)], check=True)
    assert list(tmp_path.iterdir()) == []
    killed = subprocess.run(
        [sys.executable, "-c", code + "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", str(tmp_path)]
    )
    assert killed.returncode == -signal.SIGKILL and len(list(tmp_path.iterdir())) == 1
    with scratch_folder("cost", tmp_path) as mine:
        assert list(tmp_path.iterdir()) == [mine]


def test_the_sweep_removes_only_what_a_finished_run_of_this_machine_left(tmp_path):
    from spladekit.common.scratch import scratch_folder

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = dead_pid()
        stale = [forged(tmp_path, gone), forged(tmp_path, gone, "dry-run", hidden=True)]
        earlier_boot = forged(tmp_path, sleeper.pid, "milvus", {"boot": "an-earlier-boot"})  # its pid means nothing now
        kept = [
            forged(tmp_path, sleeper.pid, "qdrant"),  # a live process's
            forged(tmp_path, os.getpid(), "anserini"),  # this process's
            forged(tmp_path, gone, "bmp", {"host": "another-machine"}),  # a shared file system: not ours to judge
        ]
        unowned = tmp_path / f"spladekit-v2-{gone}-0123abcd"  # the right name, no owner record: a user's folder?
        unowned.mkdir()
        wrong_pid = forged(tmp_path, gone, "ciff", {"pid": sleeper.pid})  # the record names another pid
        user = tmp_path / f"spladekit-notes-{gone}-draft"  # not a scratch name
        user.mkdir()
        with scratch_folder("pisa", tmp_path) as mine:
            assert not any(path.exists() for path in [*stale, earlier_boot])
            assert all(path.exists() for path in [*kept, unowned, wrong_pid, user, mine])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_sweep_that_cannot_remove_a_folder_goes_on(tmp_path, monkeypatch):
    from spladekit.common import scratch as scratch_module
    from spladekit.common.scratch import scratch_folder

    first, second = forged(tmp_path, dead_pid(), "anserini"), forged(tmp_path, dead_pid(), "pisa")
    real = scratch_module.shutil.rmtree
    monkeypatch.setattr(
        scratch_module.shutil,
        "rmtree",
        lambda path, **kwargs: None if Path(path) == first else real(path, **kwargs),
    )
    with scratch_folder("bmp", tmp_path):
        assert first.exists() and not second.exists()


def test_a_folder_it_cannot_write_in_is_one_error_line(tmp_path):
    from spladekit.common.errors import SpladekitError
    from spladekit.common.scratch import scratch_folder

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(SpladekitError, match="cannot make a scratch folder here") as error:
        scratch_folder("ciff", tmp_path / "a-file")
    assert "\n" not in str(error.value) and (tmp_path / "a-file").read_text() == "x"
