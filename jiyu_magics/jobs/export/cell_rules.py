"""Which IPython commands a job leaves out, found in the Python that IPython's own input
transformer made of a cell (``!cmd`` → ``get_ipython().system('cmd')``, ``%pip install x`` →
``get_ipython().run_line_magic('pip', 'install x')``), so the rules see exactly what would run.

A job has no terminal, no browser and no one watching: package installs and shell commands
belong in the image, display-only magics show nothing, and jiyu's own job controls would make
a job submit itself. A cell tagged ``jiyu:keep`` keeps its shell and display commands.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

INSTALL_MAGICS = frozenset({"pip", "conda", "mamba", "micromamba", "uv"})
SHELL_MAGICS = frozenset(
    {"bash", "sh", "script", "system", "sx", "perl", "ruby", "python", "python2", "python3", "pypy"}
)
DISPLAY_MAGICS = frozenset(
    {
        "matplotlib",
        "html",
        "HTML",
        "javascript",
        "js",
        "latex",
        "markdown",
        "svg",
        "pinfo",
        "pinfo2",
        "pdoc",
        "pdef",
        "psource",
        "pfile",
        "who",
        "whos",
        "who_ls",
        "lsmagic",
        "magic",
        "timeit",
        "debug",
        "pdb",
        "page",
        "qtconsole",
        "connect_info",
        "load",
        "history",
        "gpu_status",
        "gpu_doctor",
        "tensorboard",
    }
)
# Extensions a job does not load: display-only ones, and jiyu_magics, which every job script
# loads itself (a second %load_ext would only print "already loaded" into each rank's log).
DISPLAY_EXTENSIONS = frozenset({"tensorboard"})
LOADED_BY_THE_SCRIPT = frozenset({"jiyu_magics"})
# Cell magics whose body is notebook code they run: the same rules apply inside them.
BODY_RUNNING_MAGICS = frozenset({"time", "capture", "prun", "train"})
# Shell commands that install packages: they belong in the image, not in every rank.
INSTALLERS = frozenset({"pip", "pip3", "conda", "mamba", "micromamba", "uv", "apt", "apt-get"})
# jiyu's own job controls: run inside a job they would submit (or stop) jobs from the job.
CONTROL_MAGICS = frozenset({"submit", "jobs", "job"})
KEEP_TAG, SKIP_TAG, PARAMETERS_TAG = "jiyu:keep", "jiyu:skip", "parameters"
LOADED_BY_SCRIPT = "loaded by the job script itself"


@dataclass(frozen=True)
class Command:
    """One IPython command in transformed code: ``kind`` is system|getoutput|line|cell."""

    kind: str
    name: str  # the magic's name, or the shell command line
    args: str = ""
    body: str = ""  # a cell magic's cell

    @property
    def text(self) -> str:
        """How the user wrote it, for the comment that replaces it."""
        if self.kind == "system":
            return f"!{self.name}"
        prefix = "%%" if self.kind == "cell" else "%"
        return f"{prefix}{self.name} {self.args}".rstrip()

    def reason_to_leave_out(self, keep: bool) -> str | None:
        if self.kind == "getoutput":
            return None  # `files = !ls`: the code uses its value, so it must run
        if self.loaded_by_the_script:
            return LOADED_BY_SCRIPT
        if self.name in CONTROL_MAGICS and self.kind in ("line", "cell"):
            return "job control: a job does not submit or stop jobs"
        if keep:
            return None
        if self.name in INSTALL_MAGICS or (self.kind == "system" and self._installs()):
            return "package install: put it in the image"
        if self.kind == "system" or self.name in SHELL_MAGICS:
            return "shell command"
        if self.name in DISPLAY_MAGICS or self._extension() in DISPLAY_EXTENSIONS:
            return "display-only"
        return None

    @property
    def loaded_by_the_script(self) -> bool:
        return self._extension() in LOADED_BY_THE_SCRIPT

    def _extension(self) -> str | None:
        if self.kind != "line" or self.name not in ("load_ext", "reload_ext"):
            return None
        words = self.args.split()
        return words[0] if words else None

    def _installs(self) -> bool:
        words = self.name.split()
        while words and (words[0] in ("sudo", "python", "python3", "-m") or "=" in words[0]):
            words = words[1:]
        return bool(words) and words[0] in INSTALLERS


_METHODS = {"system": "system", "getoutput": "getoutput", "run_line_magic": "line", "run_cell_magic": "cell"}


def command_of(node: ast.AST) -> Command | None:
    """The IPython command a statement runs, when it is ``get_ipython().<method>('...', ...)``
    with literal arguments, as the transformer writes them."""
    call = getattr(node, "value", None)
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in _METHODS
        and _is_get_ipython(call.func.value)
    ):
        return None
    values = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not values or len(values) < len(call.args):  # an argument that is not a literal string
        return None
    kind = _METHODS[call.func.attr]
    if kind in ("system", "getoutput"):
        return Command(kind, values[0])
    return Command(kind, values[0], values[1] if len(values) > 1 else "", values[2] if len(values) > 2 else "")


def _is_get_ipython(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "get_ipython"
        and not node.args
    )


def clears_namespace(code: str) -> bool:
    """Whether transformed code (as IPython's ``In`` holds it) resets the user's namespace:
    ``%reset`` with only options (``-f``, ``-s``, ``--aggressive``), not ``%reset in``/``out``/
    ``dhist``/``array``, which flush a cache and keep the names; or ``get_ipython().reset()``."""
    if "reset" not in code:
        return False
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        command = command_of(node) if isinstance(node, ast.Expr) else None
        if command is not None and command.kind == "line" and command.name == "reset":
            if all(word.startswith("-") for word in command.args.split()):
                return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "reset"
            and _is_get_ipython(node.func.value)
        ):
            return True
    return False
