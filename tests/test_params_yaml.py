"""``-y YAML`` and ``-f params.yaml`` as papermill has them, for ``jiyu export``, ``jiyu submit``
and ``%submit`` (declared once in jobs/submit_options.py), and ``-p`` read as the help says."""

from __future__ import annotations

import nbformat
import pytest
from IPython.core.error import UsageError
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs import JobError
from jiyu_magics.jobs.export.params import parse_yaml

from .cli_runner import jiyu
from .test_export import run_script

PARAMETERS = "lr = 0.1\nlayers = [32]\nname = 'base'\nwhen = None"


def parameters_notebook(path):
    cells = [new_code_cell(PARAMETERS), new_code_cell("print(repr(lr), repr(layers), repr(name), repr(when))")]
    cells[0].metadata["tags"] = ["parameters"]
    nbformat.write(new_notebook(cells=cells), path)
    return path


@pytest.mark.parametrize(
    "text, params",
    [
        ("lr: 0.001\nlayers: [64, 128]", {"lr": 0.001, "layers": [64, 128]}),
        ("lr: 3e-4", {"lr": 3e-4}),  # YAML 1.2's number, not PyYAML's text "3e-4"
        ("when: 2024-01-01", {"when": "2024-01-01"}),  # dates stay text, as papermill reads them
        ("name: '3e-4'\nflag: yes", {"name": "3e-4", "flag": True}),  # quoted stays text; YAML 1.1's yes
        ("{lr: 0.5, name: vit}", {"lr": 0.5, "name": "vit"}),
        ("'{lr: 0.5}'", {"lr": 0.5}),  # quoted as a whole: read without the quotes
        ("", {}),
    ],
)
def test_yaml_parameters(text, params):
    assert parse_yaml(text) == params


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "-y: expected a mapping of parameter names to values (lr: 0.1), got a list"),
        ("3", "-y: expected a mapping of parameter names to values (lr: 0.1), got an int"),
        ("lr: [1", "-y: cannot read it as YAML at line 1, column 7"),
        ("1x: 3", "-y: '1x' is not a parameter name (a Python identifier)"),
        ("cmd: !!python/object/apply:os.system [ls]", "-y: cannot read it as YAML"),
    ],
)
def test_bad_yaml_is_one_line(text, message):
    with pytest.raises(JobError) as error:
        parse_yaml(text)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_jiyu_export_applies_files_then_yaml_then_pairs(tmp_path):
    nb = parameters_notebook(tmp_path / "nb.ipynb")
    (tmp_path / "params.yaml").write_text("lr: 1.0e-3\nlayers: [64, 128]\nname: from-file\nwhen: 2024-01-01\n")
    done = jiyu(
        "export",
        str(nb),
        "-o",
        str(tmp_path / "job.py"),
        "-f",
        str(tmp_path / "params.yaml"),
        "-y",
        "{name: from-yaml, lr: 2e-3}",
        "-p",
        "lr",
        "0.5",
    )
    assert done.returncode == 0, done.stderr
    assert run_script(tmp_path / "job.py", tmp_path).stdout.strip() == "0.5 [64, 128] 'from-yaml' '2024-01-01'"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-f", "missing.yaml"], "jiyu export: error: -f missing.yaml: cannot read it (No such file or directory)"),
        (["-y", "lr: [1"], "jiyu export: error: -y: cannot read it as YAML at line 1, column 7"),
        (["-y", "typo: 1"], "unknown parameter typo"),
        (["-p", "lrr", "1"], "unknown parameter lrr: cell 1 (tagged parameters) defines "),
        (["-p", "lrr", "1"], " (did you mean lr?)"),  # as a mistyped option is answered
    ],
)
def test_jiyu_export_bad_parameters_exit_2_with_one_line(tmp_path, args, message):
    nb = parameters_notebook(tmp_path / "nb.ipynb")
    done = jiyu("export", str(nb), "-o", "-", *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr


def test_jiyu_submit_takes_yaml_parameters(tmp_path, no_schedulers):
    nb = parameters_notebook(tmp_path / "nb.ipynb")
    (tmp_path / "p.yaml").write_text("layers: [8]\n")
    done = jiyu("submit", str(nb), "--backend", "slurm", "-f", "p.yaml", "-y", "lr: 3e-4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = RunStore().list()
    assert run.params == {"layers": [8], "lr": 3e-4}


def test_submit_magic_takes_yaml_parameters(ip, tmp_path, monkeypatch, no_schedulers):
    nb = parameters_notebook(tmp_path / "nb.ipynb")
    (tmp_path / "my params.yaml").write_text("name: from-file\n")
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic(
        "submit", f"{nb} --backend slurm -y \"{{lr: 0.001, layers: [64, 128]}}\" -f 'my params.yaml' -p when 3"
    )
    (run,) = RunStore().list()
    assert run.params == {"name": "from-file", "lr": 0.001, "layers": [64, 128], "when": 3}
    with pytest.raises(UsageError, match="^-y: expected a mapping"):
        ip.run_line_magic("submit", f"{nb} --backend slurm -y '[1, 2]'")


def test_submit_magic_reads_quotes_as_the_shell_does(ip, tmp_path, no_schedulers):
    nb = parameters_notebook(tmp_path / "my nb.ipynb")
    ip.run_line_magic("submit", f"'{nb}' --backend slurm --name \"my job\" -p name \"'vit b'\" -p layers '[64, 128]'")
    (run,) = RunStore().list()
    assert run.name == "my job"
    assert run.params == {"name": "vit b", "layers": [64, 128]}  # what `jiyu submit` gives in a shell
    with pytest.raises(UsageError, match="^cannot read the options: no closing quotation in "):
        ip.run_line_magic("submit", f'{nb} --name "unclosed')


def test_the_help_says_how_p_differs_from_papermill(ip):
    doc = " ".join(ip.find_line_magic("submit").__doc__.split())
    assert "papermill's -p reads only numbers and True/False/None" in doc
    assert "-y YAML, --params-yaml YAML" in doc and "-f FILE, --params-file FILE" in doc
    done = jiyu("submit", "--help")
    assert "papermill's -p reads only numbers" in " ".join(done.stdout.split())
