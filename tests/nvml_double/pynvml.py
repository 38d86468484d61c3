"""TEST DOUBLE of nvidia-ml-py's ``pynvml`` module — the one place the tests fake anything.

This machine has no NVIDIA driver, so the device tables cannot be exercised against real NVML
here. Tests put this folder first on ``sys.path``/``PYTHONPATH`` so that ``import pynvml`` in
the code under test (in-process, in a CLI subprocess, or in a Jupyter kernel) finds this module
instead. It mimics the real API's names, return shapes, units (mW, bytes) and exceptions:

* GPU 0 "NVIDIA H100 80GB HBM3": every field supported; processes: the calling process
  (marked as ours), and pid 1 (someone else's, with no visible command line in some sandboxes).
* GPU 1 "Tesla T4": utilisation, temperature, power, clocks, MIG and process queries raise
  ``NVMLError_NotSupported`` (as on vGPU/some datacenter SKUs); memory is reported.

Memory comes as NVML reports it: v2 (``version=nvmlMemory_v2``) has ``reserved`` apart and a
``used`` without it, v1 counts the reserved memory as used. ``JIYU_NVML_DOUBLE_NO_V2=1`` makes
the v2 call fail as on a driver without it.

``JIYU_NVML_DOUBLE_COUNT=0`` makes it report a loaded driver with no GPU; ``=missing`` makes
``nvmlInit`` fail like a host without the library.

A shared box (the GPU lease and queue tests): ``JIYU_NVML_DOUBLE_GPUS=N`` reports N identical,
fully supported "NVIDIA H100 80GB HBM3" devices (UUIDs ``GPU-00000000-0000-0000-0000-00000000000<i>``)
with no processes, 0% utilisation and nothing used, instead of the two above.
``JIYU_NVML_DOUBLE_PROCESSES=FILE`` then gives each device a process list, read on every call so a
test can change it while the processes it starts run: ``{"processes": {"0": [[pid, bytes], ...]},
"util": {"0": 80}, "host_processes": {"1": [[pid, bytes]]}}``. Like NVML, a pid that is no longer
alive is not listed; ``host_processes`` are listed whatever this machine's process table says (NVML
inside a container reports host pids). A device's memory used is what its listed processes hold.
"""

import json
import os
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VALUE_NOT_AVAILABLE_ulonglong = 2**64 - 1
nvmlMemory_v2 = 0x02000028
_DOUBLE = True  # lets tests assert the double is the module in use


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self):
        return "Not Supported"


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self):
        return "NVML Shared Library Not Found"


class NVMLError_FunctionNotFound(NVMLError):
    def __str__(self):
        return "Function Not Found"


class NVMLError_InvalidArgument(NVMLError):
    def __str__(self):
        return "Invalid Argument"


GIB = 2**30
MIB = 2**20
_DEVICES = [
    dict(
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-11111111-2222-3333-4444-555555555555",
        total=80 * GIB,
        used=12 * GIB,
        reserved=615 * MIB,
        util=(45, 30),
        temp=54,
        power=250_000,
        limit=700_000,
        sm=1980,
        mig=(0, 0),
    ),
    dict(
        name="Tesla T4",
        uuid="GPU-99999999-8888-7777-6666-000000000000",
        total=16 * GIB,
        used=1 * GIB,
        reserved=0,
        util=None,
        temp=None,
        power=None,
        limit=None,
        sm=None,
        mig=None,
    ),
]
calls = {"init": 0}


def _uniform(index):
    return dict(
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        index=index,
        total=80 * GIB,
        used=0,
        reserved=0,
        util=(0, 0),
        temp=40,
        power=70_000,
        limit=700_000,
        sm=1980,
        mig=(0, 0),
    )


def _shared_box_device(index):
    """Device ``index`` of a shared box, with its processes, or None (the defaults). The state
    file is parsed once per change; which listed pids are alive is checked on every call."""
    if not os.environ.get("JIYU_NVML_DOUBLE_GPUS"):
        return None
    state = _state(os.environ.get("JIYU_NVML_DOUBLE_PROCESSES"))
    device = _uniform(index)
    device["procs"] = [(pid, used) for pid, used in state.get("processes", {}).get(str(index), []) if _alive(pid)]
    device["procs"] += [(pid, used) for pid, used in state.get("host_processes", {}).get(str(index), [])]
    device["used"] = sum(used or 0 for _, used in device["procs"])
    util = state.get("util", {}).get(str(index), 0)
    device["util"] = (util, util)
    return device


_parsed = {}


def _state(path):
    try:
        stat = os.stat(path)
    except (OSError, TypeError):
        return {}
    key = (path, stat.st_mtime_ns, stat.st_size, stat.st_ino)
    if key not in _parsed:
        with open(path) as f:
            _parsed.clear()
            _parsed[key] = json.load(f)
    return _parsed[key]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead to NVML: its memory is freed
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _count():
    box = os.environ.get("JIYU_NVML_DOUBLE_GPUS")
    if box:
        return int(box)
    value = os.environ.get("JIYU_NVML_DOUBLE_COUNT", "2")
    return None if value == "missing" else int(value)


def nvmlInit():
    if _count() is None:
        raise NVMLError_LibraryNotFound()
    calls["init"] += 1


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return _count()


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < _count():
        raise NVMLError_InvalidArgument()
    device = _shared_box_device(index)
    return device if device is not None else _DEVICES[index]


def _supported(value):
    if value is None:
        raise NVMLError_NotSupported()
    return value


def nvmlSystemGetDriverVersion():
    return "550.54.15"


def nvmlSystemGetCudaDriverVersion():
    return 12040


def nvmlDeviceGetName(h):
    return h["name"]


def nvmlDeviceGetUUID(h):
    return h["uuid"]


def nvmlDeviceGetUtilizationRates(h):
    gpu, memory = _supported(h["util"])
    return SimpleNamespace(gpu=gpu, memory=memory)


def nvmlDeviceGetMemoryInfo(h, version=None):
    free = h["total"] - h["used"] - h["reserved"]
    if not version:  # v1: the driver's reserved memory counts as used
        return SimpleNamespace(total=h["total"], used=h["used"] + h["reserved"], free=free)
    if os.environ.get("JIYU_NVML_DOUBLE_NO_V2"):
        raise NVMLError_FunctionNotFound()
    return SimpleNamespace(version=version, total=h["total"], reserved=h["reserved"], used=h["used"], free=free)


def nvmlDeviceGetTemperature(h, sensor):
    return _supported(h["temp"])


def nvmlDeviceGetPowerUsage(h):
    return _supported(h["power"])


def nvmlDeviceGetEnforcedPowerLimit(h):
    return _supported(h["limit"])


def nvmlDeviceGetClockInfo(h, clock):
    return _supported(h["sm"])


def nvmlDeviceGetMigMode(h):
    return list(_supported(h["mig"]))


def nvmlDeviceGetComputeRunningProcesses(h):
    if "procs" in h:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h["procs"]]
    if h is not _DEVICES[0]:
        raise NVMLError_NotSupported()
    return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * GIB), SimpleNamespace(pid=1, usedGpuMemory=None)]


def nvmlDeviceGetGraphicsRunningProcesses(h):
    return []
