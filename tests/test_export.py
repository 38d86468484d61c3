"""The exporter on a corpus of varied notebooks: IPython syntax, skip rules, tags, parameters,
history export, and the generated script run for real under its headless IPython shell."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from jiyu_magics.jobs import ExecutedCell, JobError, export_history, export_notebook, parse_pairs
from jiyu_magics.jobs.export.params import check_params, parse_lines

from .cli_runner import jiyu
from .conftest import ROOT


def write_nb(path: Path, *cells, tags: dict[int, list[str]] | None = None, language: str = "python") -> Path:
    cells = [c if not isinstance(c, str) else new_code_cell(c) for c in cells]
    for index, cell_tags in (tags or {}).items():
        cells[index].metadata["tags"] = cell_tags
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "k", "display_name": "k", "language": language}})
    nbformat.write(nb, path)
    return path


def run_script(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=120)


# A corpus a researcher's notebooks look like: each entry is (cells, tags).
CORPUS = {
    "plain": (["import math\nx = math.sqrt(16)", "print('x is', x)"], {}),
    "markdown_raw_unicode": (
        [
            new_markdown_cell("# Überschrift ✓\nText with `code`"),
            new_raw_cell("raw: %%not-run"),
            "s = 'héllo ✓ 数据'\nprint(s)",
        ],
        {},
    ),
    "magics": (
        [
            "%%time\ntotal = sum(range(10))",
            "%matplotlib inline\nimport os",
            "%env JIYU_TEST_ENV=1",
            "print(os.environ['JIYU_TEST_ENV'], total)",
        ],
        {},
    ),
    "shell": (
        [
            "!pip install nothing-at-all\n%pip install nothing\nimport sys",
            "files = !echo a b\nprint(files)",
            "for i in range(2):\n    !echo loop\n    print('iteration', i)",
        ],
        {},
    ),
    "tags": (
        ["keep_me = 1", "raise SystemExit('must be skipped')", "!echo kept shell", "print('kept', keep_me)"],
        {1: ["jiyu:skip"], 2: ["jiyu:keep"]},
    ),
    "control": (["%load_ext jiyu_magics", "%submit --nproc 2", "%jobs", "print('no recursion')"], {}),
    "help_and_display": (["x = [1, 2]", "x?", "%who", "%%html\n<b>hi</b>", "print(len(x))"], {}),
    "writefile": (["%%writefile helper_mod.py\nVALUE = 41\n", "import helper_mod\nprint(helper_mod.VALUE + 1)"], {}),
    "capture": (["%%capture out\nprint('hidden')\n!echo also-hidden", "print(repr(out.stdout))"], {}),
    "empty_and_comments": (["", "# only a comment", "   \n", "y = 3\nprint(y)"], {}),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_exports_to_a_script_that_compiles(name, tmp_path):
    cells, tags = CORPUS[name]
    export = export_notebook(write_nb(tmp_path / f"{name}.ipynb", *cells, tags=tags))
    compile(export.script, name, "exec")
    assert export.script.startswith("#!/usr/bin/env python3\n# Exported by jiyu")
    code = [c for c in cells if not hasattr(c, "cell_type") or c.cell_type == "code"]
    nonblank = [
        i
        for i, c in enumerate(cells)
        if (c if isinstance(c, str) else c.source).strip()
        and (isinstance(c, str) or c.cell_type == "code")
        and "jiyu:skip" not in tags.get(i, [])
    ]
    for index in nonblank:  # every kept cell says where it came from
        assert f"# %% cell {index + 1}" in export.script
    assert export.code_cells == len(nonblank) and len(code) >= export.code_cells


def test_cells_without_ipython_syntax_round_trip_exactly(tmp_path):
    sources = [
        "import math\nx = math.sqrt(16)",
        "def f(a, *, b=2):\n    '''doc'''\n    return a + b\n",
        "s = '''\n!not a shell line\n%not a magic\n'''",
        "print(f(1), s)",
    ]
    script = export_notebook(write_nb(tmp_path / "nb.ipynb", *sources)).script
    for source in sources:
        assert TransformerManager().transform_cell(source).rstrip("\n") in script
    body = script.split("\n_jiyu_headless_shell()\n", 1)[1]
    cells = "\n".join(line for line in body.splitlines() if not line.startswith("_jiyu_stop_point("))
    assert ast.dump(ast.parse("\n".join(sources))) == ast.dump(ast.parse(cells))
    assert [line for line in body.splitlines() if line.startswith("_jiyu_stop_point(")] == [
        "_jiyu_stop_point('cell 2')",
        "_jiyu_stop_point('cell 3')",
        "_jiyu_stop_point('cell 4')",
    ]


def test_magics_become_ipython_calls_and_cell_bodies_stay_readable(tmp_path):
    script = export_notebook(write_nb(tmp_path / "nb.ipynb", "%%time\na = 1\nb = 2\nprint(a + b)")).script
    assert "get_ipython().run_cell_magic('time', '', '''\\\na = 1\nb = 2\nprint(a + b)\n''')" in script


def test_shell_install_display_and_control_commands_are_left_out_with_a_comment(tmp_path):
    cells, tags = CORPUS["shell"]
    export = export_notebook(write_nb(tmp_path / "nb.ipynb", *cells, tags=tags))
    assert (
        "# jiyu: left out !pip install nothing-at-all (package install: put it in the image; tag the cell "
        "jiyu:keep to run it)" in export.script
    )
    assert "# jiyu: left out %pip install nothing (package install" in export.script
    assert "    pass  # jiyu: left out !echo loop (shell command" in export.script  # an indented one keeps its block
    assert "files = get_ipython().getoutput('echo a b')" in export.script  # its value is used: kept
    assert export.left_out == [
        "cell 1: !pip install nothing-at-all (package install: put it in the image)",
        "cell 1: %pip install nothing (package install: put it in the image)",
        "cell 3: !echo loop (shell command)",
    ]
    control = export_notebook(write_nb(tmp_path / "c.ipynb", *CORPUS["control"][0], tags={1: ["jiyu:keep"]}))
    assert "# jiyu: left out %submit --nproc 2 (job control: a job does not submit or stop jobs)" in control.script
    assert "# jiyu: %load_ext jiyu_magics (loaded by the job script itself)" in control.script
    assert not any("load_ext" in note for note in control.left_out)  # nothing lost: no note


def test_every_job_script_loads_jiyu_magics_even_when_the_notebook_never_did(tmp_path):
    """A profile (c.InteractiveShellApp.extensions) loads the extension without %load_ext in the
    kernel's history: the script must still have the magics, and say nothing twice."""
    cells = [
        "print('train magic:', get_ipython().find_cell_magic('train') is not None)",
        "%load_ext jiyu_magics",
        "%reload_ext jiyu_magics\nprint('after reload')",
    ]
    out = tmp_path / "job.py"
    export_notebook(write_nb(tmp_path / "nb.ipynb", *cells)).write(out)
    done = run_script(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "train magic: True" in done.stdout and "after reload" in done.stdout
    assert "already loaded" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "cells, trains",
    [
        (["x = 1", "%%train --epochs 1\nmodel = None"], True),
        (["%train --resume last"], True),
        (["from jiyu_magics.train import fit\nresult = fit(model, opt, data) if False else None"], True),
        (["for step in range(3):\n    loss = step"], False),
    ],
)
def test_the_export_knows_whether_the_notebook_trains(cells, trains, tmp_path):
    assert export_notebook(write_nb(tmp_path / "nb.ipynb", *cells)).trains is trains


def test_tensorboard_is_left_out_as_display_only(tmp_path):
    export = export_notebook(
        write_nb(tmp_path / "nb.ipynb", "%load_ext tensorboard", "%tensorboard --logdir runs", "print('trained')")
    )
    assert [note.split(": ", 1)[1] for note in export.left_out] == [
        "%load_ext tensorboard (display-only)",
        "%tensorboard --logdir runs (display-only)",
    ]
    done = run_script(export.write(tmp_path / "job.py"), tmp_path)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr


def test_rules_reach_commands_nested_in_compound_statements(tmp_path):
    source = (
        "try:\n    !echo in-try\nexcept Exception:\n    %pip install x\nelse:\n    pass\n"
        "with open(__file__) as f:\n    if True:\n        %matplotlib inline\n"
    )
    export = export_notebook(write_nb(tmp_path / "nb.ipynb", source))
    assert [note.split(": ", 1)[1] for note in export.left_out] == [
        "!echo in-try (shell command)",
        "%pip install x (package install: put it in the image)",
        "%matplotlib inline (display-only)",
    ]
    compile(export.script, "nb", "exec")


def test_rules_apply_inside_the_body_of_time_and_capture(tmp_path):
    script = export_notebook(write_nb(tmp_path / "nb.ipynb", *CORPUS["capture"][0])).script
    assert "# jiyu: left out !echo also-hidden (shell command" in script
    assert "run_cell_magic('capture', 'out'," in script


@pytest.mark.parametrize("reset", ["%reset -f", "get_ipython().reset()"])
def test_a_reset_clears_the_notebooks_names_and_the_job_goes_on(reset, tmp_path):
    """As in the notebook, names defined before the reset are gone after it; the script's own
    names (the stop points between cells) come back, so the cells after it run."""
    cells = ["x = 1", reset, "print('after reset', 'x' in globals())", "print('a later cell', 'x' in globals())"]
    nb = write_nb(tmp_path / "nb.ipynb", *cells)
    out = tmp_path / "job.py"
    export_notebook(nb).write(out)
    done = run_script(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "after reset False" in done.stdout and "a later cell False" in done.stdout


@pytest.mark.parametrize(
    "name",
    ["plain", "markdown_raw_unicode", "magics", "shell", "tags", "control", "help_and_display", "writefile", "capture"],
)
def test_exported_scripts_run_under_a_headless_ipython(name, tmp_path):
    cells, tags = CORPUS[name]
    out = tmp_path / "job.py"
    export_notebook(write_nb(tmp_path / "nb.ipynb", *cells, tags=tags)).write(out)
    done = run_script(out, tmp_path)
    assert done.returncode == 0, done.stderr
    expected = {
        "plain": "x is 4.0",
        "markdown_raw_unicode": "héllo ✓ 数据",
        "magics": "1 45",
        "shell": "iteration 1",
        "tags": "kept 1",
        "control": "no recursion",
        "help_and_display": "2",
        "writefile": "42",
        "capture": "'hidden\\n'",
    }[name]
    assert expected in done.stdout
    assert "loop" not in done.stdout and "must be skipped" not in done.stderr
    if name == "tags":
        assert "kept shell" in done.stdout  # jiyu:keep runs the shell command
    if name == "shell":
        assert "['a b']" in done.stdout


def test_parameters_are_injected_after_the_parameters_cell(tmp_path):
    nb = write_nb(
        tmp_path / "nb.ipynb",
        "import math",
        "lr = 0.1\narch = 'resnet'\nlayers = [1]",
        "print(repr(lr), repr(arch), repr(layers))",
        tags={1: ["parameters"]},
    )
    export = export_notebook(nb, parse_pairs([("lr", "3e-4"), ("arch", "vit"), ("layers", "[2, 3]")]))
    script = export.script
    assert (
        script.index("# %% cell 2 (tags: parameters)")
        < script.index("# %% injected parameters")
        < script.index("# %% cell 3")
    )
    assert "lr = 0.0003\narch = 'vit'\nlayers = [2, 3]" in script
    export.write(tmp_path / "job.py")
    assert run_script(tmp_path / "job.py", tmp_path).stdout.strip() == "0.0003 'vit' [2, 3]"


def test_parameters_defined_by_unpacking_or_annotation_are_known(tmp_path):
    nb = write_nb(tmp_path / "nb.ipynb", "lr, (wd, beta) = 0.1, (0.0, 0.9)\nepochs: int = 1", tags={0: ["parameters"]})
    assert "beta = 0.5" in export_notebook(nb, {"beta": 0.5, "epochs": 2}).script
    broken = write_nb(tmp_path / "broken.ipynb", "lr = (", tags={0: ["parameters"]})
    with pytest.raises(JobError, match="cell 1 is not valid Python"):
        export_notebook(broken, {"lr": 1})


def test_without_a_parameters_cell_values_are_injected_first(tmp_path):
    export = export_notebook(write_nb(tmp_path / "nb.ipynb", "print(epochs)"), {"epochs": 3})
    assert export.script.index("epochs = 3") < export.script.index("# %% cell 1")
    assert "no cell is tagged 'parameters'" in export.script


@pytest.mark.parametrize(
    "text, value",
    [
        ("3e-4", 3e-4),
        ("10", 10),
        ("True", True),
        ("None", None),
        ("resnet", "resnet"),
        ("'quoted'", "quoted"),
        ("[1, 2]", [1, 2]),
        ("{'a': 1}", {"a": 1}),
        ("-1", -1),
        ("a b", "a b"),
        ("", ""),
    ],
)
def test_parameter_values_are_literals_and_other_text_stays_a_string(text, value):
    assert parse_pairs([("x", text)]) == {"x": value}


@pytest.mark.parametrize(
    "text, value",
    [
        ("3e-4", 3e-4),
        ("True", True),
        ("resnet", "resnet"),
        ("[1, 2]", [1, 2]),
        ("'a = b'", "a = b"),
        ("a b", "a b"),
        ("", ""),
    ],
)
def test_parameter_lines_read_values_as_the_p_option_does(text, value):
    assert parse_lines([f"x = {text}"]) == parse_pairs([("x", text)]) == {"x": value}
    assert parse_lines(["", "  # a comment", f"  x={text}  "]) == {"x": value}


@pytest.mark.parametrize(
    "line, message",
    [
        ("1x = 3", "line 2 ('1x = 3'): '1x' is not a Python identifier"),
        ("lr = [1, 2", "line 2 ('lr = [1, 2'): '[1, 2' is not a valid Python literal"),
        ("lr 3", "line 2 ('lr 3'): expected NAME = VALUE"),
    ],
)
def test_a_parameter_line_that_cannot_be_read_is_named(line, message):
    with pytest.raises(JobError) as error:
        parse_lines(["ok = 1", line])
    assert str(error.value) == f"parameter {message}"


@pytest.mark.parametrize(
    "pair, message",
    [
        (("1x", "3"), "must be a Python identifier"),
        (("class", "3"), "must be a Python identifier"),
        (("lr", "[1, 2"), "is not a valid Python literal"),
        (("lr", "{'a':"), "is not a valid Python literal"),
    ],
)
def test_malformed_parameters_are_one_line_errors(pair, message):
    with pytest.raises(JobError, match=message) as error:
        parse_pairs([pair])
    assert "\n" not in str(error.value)


def test_unknown_parameter_names_and_unwritable_values_are_refused(tmp_path):
    nb = write_nb(tmp_path / "nb.ipynb", "lr = 0.1", tags={0: ["parameters"]})
    with pytest.raises(JobError, match="unknown parameter lrr: cell 1 \\(tagged parameters\\) defines lr"):
        export_notebook(nb, {"lrr": 1})
    with pytest.raises(JobError, match="cannot be written as a Python literal"):
        check_params({"lr": object()})


def test_history_export_leaves_out_cells_that_failed(tmp_path):
    export = export_history(
        [ExecutedCell("x = 20", 1), ExecutedCell("1 / 0", 2, succeeded=False), ExecutedCell("!ls", 3), "x += 1"],
        current="print(x * 2)",
    )
    assert "# In [2] left out: it raised an error when it ran in the kernel" in export.script
    assert "1 / 0" not in export.script and "# %% In [1]" in export.script
    assert "# %% the current cell" in export.script
    (tmp_path / "job.py").write_text(export.script)
    assert run_script(tmp_path / "job.py", tmp_path).stdout.strip() == "42"


def test_history_cells_from_ipython_execution_results(ip):
    results = []
    ip.events.register("post_run_cell", results.append)
    try:
        ip.run_cell("a = 2", store_history=True)
        ip.run_cell("undefined_name", store_history=True)
    finally:
        ip.events.unregister("post_run_cell", results.append)
    cells = [ExecutedCell.from_result(r) for r in results]
    assert [(c.source, c.succeeded) for c in cells] == [("a = 2", True), ("undefined_name", False)]
    assert "undefined_name" not in export_history(cells).script


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.ipynb", "no such notebook"),
        (lambda p: p, "is not a notebook file"),
        (lambda p: (p / "t.ipynb").write_text("not json") and p / "t.ipynb", "is not a Jupyter notebook"),
        (lambda p: (p / "j.ipynb").write_text('{"a": 1}') and p / "j.ipynb", "is not a Jupyter notebook"),
        (lambda p: write_nb(p / "r.ipynb", "x <- 1", language="R"), "is a R notebook"),
        (
            lambda p: write_nb(p / "s.ipynb", "ok = 1", "def broken(:\n    pass"),
            "cell 2 is not valid Python: invalid syntax \\(line 1\\)",
        ),
        (
            lambda p: write_nb(p / "a.ipynb", "await thing()"),
            "cell 1 is not valid Python: 'await' outside function \\(line 1\\)",
        ),
    ],
)
def test_bad_notebooks_are_one_line_errors(make, message, tmp_path):
    with pytest.raises(JobError, match=message) as error:
        export_notebook(make(tmp_path))
    assert "\n" not in str(error.value)


def test_jiyu_export_writes_the_script(tmp_path):
    nb = write_nb(tmp_path / "nb.ipynb", "n = 1", "!echo hi\nprint(n * 7)", tags={0: ["parameters"]})
    done = jiyu("export", str(nb), "-o", str(tmp_path / "job.py"), "-p", "n", "6")
    assert done.returncode == 0, done.stderr
    assert "Wrote" in done.stdout and "left out cell 2: !echo hi (shell command)" in done.stdout
    assert run_script(tmp_path / "job.py", tmp_path).stdout.strip() == "42"
    bad = jiyu("export", str(tmp_path / "nope.ipynb"), "-o", str(tmp_path / "x.py"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such notebook" in bad.stderr


def test_the_exporter_does_not_import_ipython_or_torch_until_it_exports():
    code = (
        "import sys, jiyu_magics.jobs, jiyu_magics.commands.job_commands\n"
        "print(sorted(m for m in ('torch', 'IPython', 'ipywidgets', 'tornado') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
