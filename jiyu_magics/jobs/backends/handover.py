"""What happened when a run was handed to a scheduler: submitted (with the scheduler's answer)
or not, and the text to show the user. Kept in the run folder for the views."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...core.runs.files import RunFiles

HANDOVER_FILE = "handover.json"


@dataclass
class Handover:
    """What happened to a spec: ``submitted`` (with the scheduler's answer) or not, and the
    text to show the user (what was submitted, or how to submit it)."""

    backend: str
    spec_file: str
    submitted: bool
    message: str

    def save(self, files: RunFiles) -> None:
        (files.root / HANDOVER_FILE).write_text(json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls, run_id: str) -> Handover | None:
        try:
            return cls(**json.loads((RunFiles.of(run_id).root / HANDOVER_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None
