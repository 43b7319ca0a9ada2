"""The output cannot be written (a full disk, a quota, permissions mid-run): one error line, exit status 74, what
was written before left valid, and --resume from the newest complete checkpoint once there is room (issue 63,
item 6). The disk is simulated: a file system's free space and a write that fails with ENOSPC."""

import collections
import errno
import json
import os

import pytest

from fedjax_clust.cli.commands import main
from fedjax_clust.io import checkpoint, jsonio, unwritable
from fedjax_clust.io.unwritable import OutputError, is_output_failure

RUN = [
    "run",
    "--algorithm",
    "federated-clustering",
    "--clients-per-cluster",
    "5",
    "--rounds",
    "8",
    "--eval-every",
    "2",
    "--no-progress",
]


def test_a_disk_that_fills_stops_the_run_in_one_line_and_resume_finishes_it(tmp_path, monkeypatch, capsys):
    """Room for the round-2 checkpoint, then none: exit 74 at round 4 naming the checkpoint, round 2's kept; with
    room again --resume gives the uninterrupted run's rows."""
    usage = collections.namedtuple("usage", "total used free")
    calls = []

    def disk_usage(path):
        calls.append(path)
        return usage(10**9, 0, 10**9 if len(calls) == 1 else 500)

    monkeypatch.setattr(unwritable.shutil, "disk_usage", disk_usage)
    out = tmp_path / "r"
    assert main([*RUN, "--checkpoint-every", "2", "--out", str(out)]) == unwritable.EXIT_STATUS
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: cannot write the checkpoint of round 4 in {out}/checkpoints: it needs about ")
    assert "and the disk has 500 bytes free; the files written before are intact" in err
    assert sorted(os.listdir(out / "checkpoints")) == ["round_00000002"]
    monkeypatch.undo()
    assert main(["run", "--out", str(out), "--resume", "--no-progress"]) == 0
    assert main([*RUN, "--out", str(tmp_path / "straight")]) == 0
    assert (out / "metrics.jsonl").read_text() == (tmp_path / "straight" / "metrics.jsonl").read_text()


class _FailingCheckpointer:
    """Orbax's way of failing on a full disk: part of the state written, then TensorStore's ValueError."""

    def save(self, path, state):
        os.makedirs(path)
        with open(os.path.join(path, "part"), "w") as f:
            f.write("x" * 100)
        raise ValueError(
            'RESOURCE_EXHAUSTED: Error writing "params/0.0" in OCDBT database: Failed to write 9308 '
            "bytes to file 5: No space left on device [os_error_code='28']"
        )

    def wait_until_finished(self):
        pass


def test_a_checkpoint_that_fails_half_way_is_removed_and_named(tmp_path, monkeypatch):
    import jax.numpy as jnp

    state = {"w": jnp.ones((3, 2))}
    checkpoint.save_checkpoint(str(tmp_path), 2, state, [{"round": 2}], {"a": 1})
    monkeypatch.setattr(checkpoint, "_checkpointer", _FailingCheckpointer)
    with pytest.raises(OutputError) as info:
        checkpoint.save_checkpoint(str(tmp_path), 4, state, [{"round": 4}], {"a": 1})
    assert str(info.value) == (
        f"cannot write the checkpoint of round 4 in {tmp_path} (no space left on device); "
        "round 2's is the newest intact one"
    )
    assert info.value.errno == errno.ENOSPC
    assert sorted(os.listdir(tmp_path)) == ["round_00000002"]  # the half-written one is gone
    assert checkpoint.latest_checkpoint(str(tmp_path)) == 2


def test_a_json_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    jsonio.write_json(str(path), {"good": 1})

    class Full:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonio, "open", Full, raising=False)
    with pytest.raises(OSError):
        jsonio.write_json(str(path), {"bad": 2})
    assert json.loads(path.read_text()) == {"good": 1} and os.listdir(tmp_path) == ["summary.json"]


def test_the_command_line_says_an_unwritable_summary_in_one_line(tmp_path, monkeypatch, capsys):
    real_open = open

    def open_refusing_the_summary(path, *args, **kwargs):
        if str(path).endswith("summary.json.tmp"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(jsonio, "open", open_refusing_the_summary, raising=False)
    assert main([*RUN, "--out", str(tmp_path / "r")]) == unwritable.EXIT_STATUS
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: cannot write {tmp_path}/r/summary.json.tmp (permission denied); the files written")
    assert (tmp_path / "r" / "metrics.jsonl").exists()


def test_what_counts_as_an_output_failure():
    assert is_output_failure(OSError(errno.ENOSPC, "full")) and is_output_failure(OSError(errno.EROFS, "ro"))
    assert not is_output_failure(FileNotFoundError(errno.ENOENT, "no such file"))  # a wrong input path
    assert is_output_failure(ValueError("RESOURCE_EXHAUSTED: ... [os_error_code='28']"))
    assert not is_output_failure(ValueError("learning_rate must be positive"))
