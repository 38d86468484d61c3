"""``%gpu_status`` / ``jiyu gpu`` as text (terminals) and HTML (notebooks): the devices, who
holds each (its lease, or free, or busy with foreign processes) and each process's owner."""

from __future__ import annotations

import time
from collections.abc import Mapping
from html import escape
from typing import Any

from ..core.box.identity import span
from ..core.gpu.snapshot import GpuDevice, GpuSnapshot
from .format import NA, bar, duration, gib, human_bytes, na, text_table

NO_GPU = "No NVIDIA GPU visible: {reason}. Run %gpu_doctor."


def no_gpu_line(snap: GpuSnapshot, doctor_hint: str = "%gpu_doctor") -> str:
    return NO_GPU.format(reason=snap.reason or "unknown reason").replace("%gpu_doctor", doctor_hint)


def versions_line(snap: GpuSnapshot) -> str:
    parts = [f"Driver {na(snap.driver_version)}", f"CUDA driver {na(snap.cuda_driver_version)}"]
    if snap.visible_devices is not None:
        parts.append(f"CUDA_VISIBLE_DEVICES={snap.visible_devices!r}")
    if snap.torch:
        t = snap.torch
        parts.append(f"torch {t['version']} (CUDA {na(t['cuda'])}, cuDNN {na(t['cudnn'])}, NCCL {na(t['nccl'])})")
    return " | ".join(parts)


def _cuda_index(d: GpuDevice) -> str:
    return "hidden" if d.visible_index is None else f"cuda:{d.visible_index}"


def _power(d: GpuDevice) -> str:
    if d.power_draw is None and d.power_limit is None:
        return NA
    return f"{na(d.power_draw, '{:.0f}')}/{na(d.power_limit, '{:.0f}')} W"


def memory_text(d: GpuDevice, unit: str = "") -> str:
    """Used / total, and the driver's reserved memory apart (as nvidia-smi separates it)."""
    reserved = f" (+{gib(d.mem_reserved)} reserved)" if d.mem_reserved else ""
    return f"{gib(d.mem_used)} / {gib(d.mem_total)}{unit}{reserved}"


def _mig(d: GpuDevice) -> str:
    return NA if d.mig_mode is None else ("on" if d.mig_mode else "off")


def render_text(snap: GpuSnapshot, doctor_hint: str = "%gpu_doctor") -> str:
    if not snap.available:
        return no_gpu_line(snap, doctor_hint)
    headers = ["GPU", "cuda", "Name", "Util", "Mem util", "Memory (GiB)", "", "Temp", "Power", "SM clock", "MIG"]
    rows = [
        [
            str(d.index),
            _cuda_index(d),
            na(d.name),
            na(d.gpu_util, "{}%"),
            na(d.mem_util, "{}%"),
            memory_text(d),
            f"[{bar(d.mem_fraction)}]",
            na(d.temperature, "{}C"),
            _power(d),
            na(d.sm_clock, "{} MHz"),
            _mig(d),
        ]
        for d in snap.devices
    ]
    out = [versions_line(snap), text_table(headers, rows, right={0, 3, 4, 7})]
    out += [f"  GPU {d.index}: {na(d.uuid)}" for d in snap.devices]
    if any(d.free is not None for d in snap.devices):
        out += ["", text_table(["GPU", "Held by"], [[str(d.index), holder_text(d)] for d in snap.devices], right={0})]
    if snap.owners_note:
        out.append(snap.owners_note)
    procs = [
        [
            str(d.index),
            f"{p.pid}{'*' if p.mine else ''}",
            p.type,
            human_bytes(p.used_memory),
            owner_text(p),
            (p.command or NA)[:60],
        ]
        for d in snap.devices
        for p in d.processes
    ]
    out.append("")
    if procs:
        out.append(text_table(["GPU", "PID", "Type", "Memory", "Owner", "Command"], procs, right={0, 3}))
        if any(p.mine for d in snap.devices for p in d.processes):
            out.append("* this process or its children")
    else:
        out.append("No processes are using the GPUs.")
    return "\n".join(out)


_STYLE = """<style>
.jiyu-gpu table{border-collapse:collapse;font-size:12px}
.jiyu-gpu th,.jiyu-gpu td{padding:2px 8px;text-align:left;white-space:nowrap}
.jiyu-gpu td.num{text-align:right}
.jiyu-gpu .bar{display:inline-block;width:90px;height:10px;background:var(--jp-layout-color3,#ddd);
  vertical-align:middle}
.jiyu-gpu .fill{height:10px;background:var(--jp-brand-color1,#2f7ed8)}
.jiyu-gpu .fill.high{background:var(--jp-warn-color1,#e08b00)}
.jiyu-gpu tr.mine td{font-weight:bold}
.jiyu-gpu .meta{font-size:11px;opacity:.8;margin:4px 0}
</style>"""


def holder_text(d: GpuDevice) -> str:
    """Who holds a GPU: its leases (run, id, kind, notebook, since), else free or busy."""
    if d.leases:
        return "; ".join(lease_text(lease) for lease in d.leases)
    if d.free is None:
        return NA
    return "free" if d.free else f"busy: {human_bytes(d.foreign_memory)} held by processes outside jiyu"


def lease_text(lease: Mapping[str, Any]) -> str:
    """A lease's holder: the run (name, id, kind, notebook, since), or for another user's
    lease on a box only what the box shows everyone: ``bob, job, 2 h``."""
    if lease.get("user") and not lease.get("mine", True):
        held = span(time.time() - lease["since"])
        return f"{lease['user']}, {lease.get('run_kind') or NA}, {held}" + (", shared" if lease.get("shared") else "")
    notebook = f" · {lease['notebook'].rsplit('/', 1)[-1]}" if lease.get("notebook") else ""
    since = time.strftime("%H:%M", time.localtime(lease["since"]))
    shared = ", shared" if lease.get("shared") else ""
    reports = f", reports {human_bytes(lease['reported_memory'])}" if lease.get("reported_memory") else ""
    return (
        f"run {lease.get('run_name') or lease['run_id']} ({lease['run_id']}, {lease.get('run_kind') or NA})"
        f"{notebook} since {since}{shared}{reports}"
    )


def owner_text(p) -> str:
    owner = p.owner or {}
    label = owner.get("label") or NA
    if owner.get("idle_s") is not None and owner.get("execution_state") == "idle":
        label += f", idle {duration(owner['idle_s'])}"
    return label


def _html_bar(fraction: float | None) -> str:
    if fraction is None:
        return NA
    pct = max(0.0, min(1.0, fraction)) * 100
    cls = "fill high" if pct > 90 else "fill"
    return (
        f'<span class="bar" role="meter" aria-valuenow="{pct:.0f}" aria-valuemin="0" aria-valuemax="100" '
        f'aria-label="memory used"><div class="{cls}" style="width:{pct:.0f}%"></div></span>'
    )


def render_html(snap: GpuSnapshot) -> str:
    if not snap.available:
        return f'<div class="jiyu-gpu">{escape(no_gpu_line(snap))}</div>'
    head = "".join(
        f"<th>{h}</th>"
        for h in ["GPU", "cuda", "Name", "Util", "Mem util", "Memory", "", "Temp", "Power", "SM clock", "MIG", "UUID"]
    )
    rows = "".join(
        f"<tr><td class=num>{d.index}</td><td>{_cuda_index(d)}</td><td>{escape(na(d.name))}</td>"
        f"<td class=num>{na(d.gpu_util, '{}%')}</td><td class=num>{na(d.mem_util, '{}%')}</td>"
        f"<td class=num>{memory_text(d, ' GiB')}</td><td>{_html_bar(d.mem_fraction)}</td>"
        f"<td class=num>{na(d.temperature, '{}&deg;C')}</td><td class=num>{_power(d)}</td>"
        f"<td class=num>{na(d.sm_clock, '{} MHz')}</td><td>{_mig(d)}</td><td>{escape(na(d.uuid))}</td></tr>"
        for d in snap.devices
    )
    procs = "".join(
        f'<tr class="{"mine" if p.mine else ""}"><td class=num>{d.index}</td><td class=num>{p.pid}</td>'
        f"<td>{p.type}</td><td class=num>{human_bytes(p.used_memory)}</td><td>{escape(owner_text(p))}</td>"
        f"<td>{escape((p.command or NA)[:120])}{' (this kernel)' if p.mine else ''}</td></tr>"
        for d in snap.devices
        for p in d.processes
    )
    proc_table = (
        f"<table><tr><th>GPU</th><th>PID</th><th>Type</th><th>Memory</th><th>Owner</th><th>Command</th>"
        f"</tr>{procs}</table>"
        if procs
        else "<div class=meta>No processes are using the GPUs.</div>"
    )
    holders = "".join(f"<tr><td class=num>{d.index}</td><td>{escape(holder_text(d))}</td></tr>" for d in snap.devices)
    holder_table = (
        f"<table><tr><th>GPU</th><th>Held by</th></tr>{holders}</table>"
        if any(d.free is not None for d in snap.devices)
        else ""
    )
    return (
        f'{_STYLE}<div class="jiyu-gpu"><div class="meta">{escape(versions_line(snap))}</div>'
        f"<table><tr>{head}</tr>{rows}</table>{holder_table}{proc_table}</div>"
    )
