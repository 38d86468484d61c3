"""One status palette for every view: the panel's chips (labextension/style/base.css), the
``%jobs``/``%runs`` tables, the dashboard's summary and the DDP rank list all colour a status
the same way. Each colour is JupyterLab's theme variable, with the light theme's value as the
fallback where no theme is loaded (a saved notebook on a website, a terminal's HTML)."""

from __future__ import annotations

from ..core.runs.model import RunStatus

# status -> (JupyterLab CSS variable, light-theme fallback); the panel's chip uses the variable
THEME_VARIABLES: dict[RunStatus, tuple[str, str]] = {
    RunStatus.RUNNING: ("--jp-brand-color1", "#1976d2"),
    RunStatus.QUEUED: ("--jp-brand-color3", "#90caf9"),
    RunStatus.STARTING: ("--jp-brand-color3", "#90caf9"),
    RunStatus.STOPPING: ("--jp-warn-color1", "#f57c00"),
    RunStatus.SUCCEEDED: ("--jp-success-color1", "#388e3c"),
    RunStatus.FAILED: ("--jp-error-color1", "#d32f2f"),
    RunStatus.LOST: ("--jp-error-color1", "#d32f2f"),
    RunStatus.STOPPED: ("--jp-warn-color1", "#f57c00"),
}
NEUTRAL = "var(--jp-ui-font-color2,#757575)"


def status_colour(status: str | RunStatus | None) -> str:
    """A CSS colour for a status (``var(--jp-…, #fallback)``), neutral for anything else."""
    try:
        variable, fallback = THEME_VARIABLES[RunStatus(status)]
    except (ValueError, KeyError):
        return NEUTRAL
    return f"var({variable},{fallback})"
