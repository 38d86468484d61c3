"""%%train in a real ipykernel: the live dashboard (driven through nbclient), a real kernel
interrupt, and a real Stop click sent as a comm message while the cell is busy training."""

from __future__ import annotations

import asyncio
import json
import time

from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

from jiyu_magics.core.store.run_store import RunStore

from .notebook_runner import first_logged_step, notebook, text_of

SETUP = """%load_ext jiyu_magics
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
X = torch.randn(2048, 20); y = (X[:, 0] > 0).long()"""

BODY = """
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(X[:512], y[:512]), batch_size=256)
loss_fn = nn.CrossEntropyLoss()"""

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class CountingClient(NotebookClient):
    """Counts the widget state updates each cell sends (what a browser would receive)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates: dict[int, int] = {}
        self.display_messages: dict[int, list[str]] = {}

    def handle_comm_msg(self, outs, msg, cell_index):
        if msg["msg_type"] == "comm_msg" and msg["content"]["data"].get("method") == "update":
            self.updates[cell_index] = self.updates.get(cell_index, 0) + 1
        return super().handle_comm_msg(outs, msg, cell_index)

    def process_message(self, msg, cell, cell_index):
        if msg["msg_type"] in ("display_data", "update_display_data"):
            self.display_messages.setdefault(cell_index, []).append(msg["msg_type"])
        return super().process_message(msg, cell, cell_index)


def test_live_dashboard_refreshes_in_place_by_wall_clock(tmp_path):
    nb = notebook(
        SETUP,
        "%%train --epochs 24 --refresh 0.25" + BODY,
        "d = get_ipython().magics_manager.registry['TrainMagics'].dashboard\n"
        "print(d.renders, d.busy_s, train_result.elapsed, train_result.status, train_result.step)",
        "other = torch.optim.SGD(nn.Linear(2, 2).parameters(), 0.1)\n%train --optimizer other",
    )
    client = CountingClient(
        nb,
        timeout=300,
        kernel_name="python3",
        store_widget_state=True,
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    renders, busy, elapsed, status, step = text_of(nb.cells[2]).split()
    renders, busy, elapsed = int(renders), float(busy), float(elapsed)
    assert status == "succeeded" and step == "1536"
    assert 3 + int(elapsed / 2) <= renders <= elapsed / 0.25 + 3, "refreshed by the clock, not per step or per log"
    assert busy / elapsed < 0.10, "a small share of the wall time (benchmarks/dashboard_share.py measures it)"
    widget_fields = 8
    assert 3 <= client.updates[1] <= renders * widget_fields, "each refresh sends at most one update per widget"
    assert client.display_messages[1] == ["display_data", "update_display_data"], "one output, updated in place"
    (output,) = nb.cells[1].outputs
    assert {"text/html", "image/png", "text/plain"} <= set(output.data) and WIDGET_MIME not in output.data
    assert "succeeded" in output.data["text/html"] and "Trained 1536 steps" in output.data["text/plain"]
    summary = output.data["text/html"]  # the themed SVG in the live notebook, the PNG beside it for exporters
    assert "<svg" in summary and "var(--jp-ui-font-color1" in summary and "<img" not in summary
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()
    progress = [s["state"]["value"] for s in states if s["model_name"] == "FloatProgressModel"]
    labels = [s["state"]["value"] for s in states if s["model_name"] == "LabelModel"]
    assert progress == [1.0] and any(label.startswith("step 1536/1536 (100%)") for label in labels)
    assert "UsageError: the optimizer holds none of model's parameters" in text_of(nb.cells[3])
    assert all(out.output_type == "stream" for out in nb.cells[3].outputs), "a rejected call leaves no widget"
    charts = [s["state"]["value"] for s in states if s["model_name"] == "HTMLModel" and "<svg" in s["state"]["value"]]
    assert charts and "<polyline" in charts[0]


def test_kernel_interrupt_stops_at_a_step_and_checkpoints(tmp_path, jiyu_home):
    nb = notebook(
        SETUP,
        "%%train --epochs 100000 --log-every 20" + BODY,
        "import os\nprint(train_result.status, train_result.step % 20 == 0 or train_result.step,"
        " os.path.exists(train_result.last_checkpoint))\nprint(train_result.message)",
    )
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})

    async def run():
        async with client.async_setup_kernel():
            await client.async_execute_cell(nb.cells[0], 0)
            training = asyncio.ensure_future(client.async_execute_cell(nb.cells[1], 1))
            await asyncio.get_running_loop().run_in_executor(None, first_logged_step, jiyu_home)
            interrupted = time.monotonic()
            await client.km.interrupt_kernel()
            await training
            await client.async_execute_cell(nb.cells[2], 2)
            return time.monotonic() - interrupted

    took = asyncio.run(run())
    status, _, checkpoint_exists = text_of(nb.cells[2]).splitlines()[0].split()
    assert status == "stopped" and checkpoint_exists == "True"
    assert "by a kernel interrupt" in text_of(nb.cells[2]) and "--resume last" in text_of(nb.cells[2])
    assert took < 30
    (run,) = RunStore().list()
    assert run.status == "stopped"


def test_stop_button_click_reaches_the_busy_kernel(tmp_path):
    """A real front-end click: a ``comm_msg`` to the Stop button's comm, sent on the shell channel
    while the training cell runs. A cell queued behind it runs afterwards, in order."""
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        assert kc.execute_interactive(SETUP, timeout=120)["content"]["status"] == "ok"
        training = kc.execute("%%train --epochs 100000 --refresh 0.2" + BODY)
        button = _wait_for_button_and_updates(kc)
        queued = kc.execute("print('after', train_result.status, train_result.step)")
        kc.shell_channel.send(
            kc.session.msg("comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}})
        )
        replies = [kc.get_shell_msg(timeout=60) for _ in range(2)]
        assert [r["parent_header"]["msg_id"] for r in replies] == [training, queued]
        assert [r["content"]["status"] for r in replies] == ["ok", "ok"]
        printed = _stream_text(kc, queued)
        status, step = printed.split()[1:3]
        assert status == "stopped" and 0 < int(step) < 12_800_000
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _wait_for_button_and_updates(kc, updates: int = 3) -> str:
    button, seen = None, 0
    deadline = time.time() + 120
    while time.time() < deadline:
        msg = kc.get_iopub_msg(timeout=60)
        content = msg["content"]
        if msg["msg_type"] == "comm_open" and content["data"]["state"].get("_model_name") == "ButtonModel":
            button = content["comm_id"]
        if msg["msg_type"] == "comm_msg" and button and "step " in json.dumps(content["data"]):
            seen += 1
            if seen >= updates:
                return button
    raise AssertionError("the dashboard never refreshed")


def _stream_text(kc, msg_id: str) -> str:
    deadline = time.time() + 30
    while time.time() < deadline:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            return msg["content"]["text"]
    raise AssertionError("the queued cell printed nothing")


def test_what_a_kernel_run_prints_goes_into_its_log_too(tmp_path, jiyu_home):
    """The panel's Logs of a kernel run read ``stdout.log``: what the cell printed (the body's
    own prints before fit registered the run, a train_step's prints, warnings) is there, and
    still in the cell's output."""
    nb = notebook(
        SETUP,
        "%%train --max-steps 20 --name printed\n"
        + BODY.replace(
            "loss_fn = nn.CrossEntropyLoss()",
            "criterion = nn.CrossEntropyLoss()\nprint('body says hello')\n"
            "def train_step(model, batch):\n"
            "    print('step says hi', flush=True)\n"
            "    return criterion(model(batch[0]), batch[1])",
        ),
    )
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    run = next(r for r in RunStore().list() if r.name == "printed")
    log = (jiyu_home / "runs" / run.id / "stdout.log").read_text()
    assert "body says hello" in log and log.count("step says hi") == 20, log
    assert "step says hi" in text_of(nb.cells[1]), "the cell's own output is unchanged"


def test_a_front_end_without_widgets_is_told_how_to_get_text_progress(tmp_path):
    """The kernel dies mid-training (a SIGKILL in the step), so the saved output keeps what a
    front-end without ipywidgets showed while the run was live: the widget's text fallback."""
    nb = notebook(
        SETUP,
        "%%train --max-steps 1000 --name no-widgets"
        + BODY.replace("loss_fn = nn.CrossEntropyLoss()", "")
        + "\nimport os, signal\ncalls = []\ndef train_step(m, batch):\n    calls.append(1)\n"
        "    if len(calls) == 30: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return nn.functional.cross_entropy(m(batch[0]), batch[1])",
    )
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except Exception as error:  # nbclient's DeadKernelError
        assert "died" in str(error).lower(), error
    fallback = [out.data["text/plain"] for out in nb.cells[1].outputs if out.output_type == "display_data"]
    assert fallback == [
        "Training dashboard (needs a widget-capable front-end; run %env JIYU_UI=text before training for text progress)"
    ], nb.cells[1].outputs
