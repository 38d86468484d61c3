"""What the installed torch was built for, read without importing it.

Importing torch costs seconds and, done carelessly, creates a CUDA context; the GPU views and
the doctor must stay cheap and side-effect free. When the user's process has already imported
torch we ask the live module (it knows cuDNN/NCCL for sure); otherwise we read ``torch/version.py``
from disk and the versions of the ``nvidia-*`` wheels next to it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import asdict, dataclass


@dataclass
class TorchFacts:
    version: str
    cuda: str | None  # torch.version.cuda: None for a CPU-only build
    cudnn: str | None = None
    nccl: str | None = None
    cuda_initialized: bool = False
    imported: bool = False  # read from the live module rather than from disk

    def to_dict(self) -> dict:
        return asdict(self)


def torch_facts() -> TorchFacts | None:
    """Facts about torch in this interpreter, or None when torch is not installed."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return _from_live_module(torch)
    return _from_disk()


def _from_live_module(torch) -> TorchFacts:
    facts = TorchFacts(version=str(torch.__version__), cuda=torch.version.cuda, imported=True)
    try:
        facts.cuda_initialized = bool(torch.cuda.is_initialized())
    except Exception:
        pass
    try:
        if torch.backends.cudnn.is_available():
            facts.cudnn = _cudnn_string(torch.backends.cudnn.version())
    except Exception:
        pass
    try:
        if torch.cuda.is_built() and torch.distributed.is_nccl_available():
            facts.nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:
        pass
    return facts


def _cudnn_string(number: int | None) -> str | None:
    if not number:
        return None
    major, rest = divmod(int(number), 10000) if number >= 10000 else divmod(int(number), 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _from_disk() -> TorchFacts | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = next(iter(spec.submodule_search_locations)) + "/version.py"
    try:
        values = _literal_assignments(open(path, encoding="utf-8").read())
    except OSError:
        return None
    facts = TorchFacts(version=str(values.get("__version__", "unknown")), cuda=values.get("cuda"))
    if facts.cuda:  # a CPU-only build ships no CUDA library wheels: skip the metadata scan
        facts.cudnn = _wheel_version("nvidia-cudnn-cu")
        facts.nccl = _wheel_version("nvidia-nccl-cu")
    return facts


def _literal_assignments(source: str) -> dict:
    values = {}
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return values


def _wheel_version(prefix: str) -> str | None:
    """The version of the CUDA library wheel torch depends on (``nvidia-cudnn-cu12`` ...)."""
    import importlib.metadata as metadata  # here: its import is ~25 ms of every CLI command's start-up

    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(prefix):
            return dist.version
    return None
