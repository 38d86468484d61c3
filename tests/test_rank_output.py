"""The ranks' lines as the cell shows them (``core.rank_output``), read from a log written as
torchrun writes it (``[rankN]:`` prefixes), and the first failing rank's traceback trimmed of
the launcher's frames. Through the real kernel: tests/test_train_nproc.py."""

from __future__ import annotations

from jiyu_magics.core.runs.rank_output import RankLines, first_traceback

TRACEBACK = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/run/job.py", line 40, in <module>
[rank1]:     get_ipython().run_line_magic('train', '--nproc 2')
[rank1]:   File "/home/u/.venv/lib/python3.11/site-packages/IPython/core/interactiveshell.py", line 2583, in run_line_magic
[rank1]:     result = fn(*args, **kwargs)
[rank1]:              ^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/home/u/.venv/lib/python3.11/site-packages/jiyu_magics/train/engine.py", line 90, in run
[rank1]:     result = self._execute()
[rank1]:              ^^^^^^^^^^^^^^^
[rank1]:   File "/tmp/run/job.py", line 12, in train_step
[rank1]:     raise RuntimeError("out of coffee")
[rank1]: RuntimeError: out of coffee
[rank0]: [W socket] connection closed by peer
[rank1]: after the error
"""


def test_rank_zero_by_default_all_with_the_toggle_newest_kept(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text("".join(f"[rank{n % 2}]: line {n}\n" for n in range(10)) + "torchrun: launcher line\n[rank1]: torn")
    lines = RankLines(log, kept=6)
    assert len(lines.read()) == 11
    assert lines.lines() == ["[rank0] line 6", "[rank0] line 8", "torchrun: launcher line"]
    assert lines.lines(all_ranks=True) == [
        "[rank1] line 5",
        "[rank0] line 6",
        "[rank1] line 7",
        "[rank0] line 8",
        "[rank1] line 9",
        "torchrun: launcher line",
    ]
    with open(log, "a") as f:
        f.write(" line\n")
    assert lines.read() == [(1, "torn line")], "a torn last line waits until it is whole"


def test_a_late_reader_starts_near_the_end_of_a_long_log(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text("".join(f"[rank0]: line {n:07d}\n" for n in range(100_000)))  # 2.3 MB
    lines = RankLines(log)
    gained = lines.read()
    assert gained[-1] == (0, "line 0099999") and 2000 < len(gained) < 4000
    assert lines.lines()[0].startswith("[rank0] line 00"), "a whole first line, not a torn one"


def test_the_first_traceback_of_a_rank_without_jiyus_or_ipythons_frames(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text(TRACEBACK)
    assert first_traceback(log, 1).splitlines() == [
        "Traceback (most recent call last):",
        '  File "/tmp/run/job.py", line 40, in <module>',
        "    get_ipython().run_line_magic('train', '--nproc 2')",
        '  File "/tmp/run/job.py", line 12, in train_step',
        '    raise RuntimeError("out of coffee")',
        "RuntimeError: out of coffee",
    ]
    assert first_traceback(log, 0) is None
