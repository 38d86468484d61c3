"""``%gpu_status --watch``: one HTML widget refreshed in place from a background thread.

A thread, not a loop in the cell: the kernel stays free to train while the table refreshes,
and the Stop button works (a busy kernel could not receive its click).
"""

from __future__ import annotations

import threading
import time

import ipywidgets as widgets

from ..core.gpu.status import owned_snapshot
from ..views import gpu_table as gpu_view


class GpuWatch:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.html = widgets.HTML(gpu_view.render_html(owned_snapshot()))
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", tooltip="Stop refreshing", layout=widgets.Layout(width="90px")
        )
        self.label = widgets.Label(f"refreshing every {seconds:g} s")
        self.widget = widgets.VBox([widgets.HBox([self.stop_button, self.label]), self.html])
        self.refreshes = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jiyu-gpu-watch", daemon=True)
        self.stop_button.on_click(lambda _: self.stop())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self.stop_button.disabled = True
        self.label.value = f"stopped after {self.refreshes} refreshes"

    def _run(self) -> None:
        while not self._stopped.wait(self.seconds):
            html = gpu_view.render_html(owned_snapshot())
            if html != self.html.value:  # an unchanged table costs no message to the front-end
                self.html.value = html
            self.refreshes += 1
            self.label.value = f"refreshing every {self.seconds:g} s · updated {time.strftime('%H:%M:%S')}"
