"""``%gpu_doctor`` / ``jiyu doctor`` as text and HTML checklists."""

from __future__ import annotations

from html import escape

from ..core.gpu.doctor import Finding

_MARK = {"ok": "ok", "warning": "WARN", "problem": "FAIL"}
_COLOR = {
    "ok": "var(--jp-success-color1,#2e7d32)",
    "warning": "var(--jp-warn-color1,#e08b00)",
    "problem": "var(--jp-error-color1,#c62828)",
}


def verdict(findings: list[Finding]) -> str:
    problems = sum(f.level == "problem" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    if problems:
        return (
            f"{problems} problem(s), {warnings} warning(s): CUDA training will not work until the problems are fixed."
        )
    if warnings:
        return f"No problems, {warnings} warning(s)."
    return "All checks passed."


def render_text(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"[{_MARK[f.level]:>4}] {f.check.ljust(width)}  {f.summary}")
        if f.fix and f.level != "ok":
            lines.append(f"       {' ' * width}  fix: {f.fix}")
    lines.append(verdict(findings))
    return "\n".join(lines)


def render_html(findings: list[Finding]) -> str:
    rows = "".join(
        f"<tr><td style='color:{_COLOR[f.level]};font-weight:bold'>{_MARK[f.level]}</td>"
        f"<td>{escape(f.check)}</td><td>{escape(f.summary)}"
        + (f"<br><small><b>fix:</b> {escape(f.fix)}</small>" if f.fix and f.level != "ok" else "")
        + "</td></tr>"
        for f in findings
    )
    return (
        f"<div class='jiyu-doctor'><table style='font-size:12px'>{rows}</table><p>{escape(verdict(findings))}</p></div>"
    )
