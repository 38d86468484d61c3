"""The engine on the CPU: it trains, and each promise of fit (AMP, accumulation, clipping,
exact resume, NaN stop, stop requests, events) holds against a real model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.train import StopSignal, TrainingFailed, fit
from jiyu_magics.train.checkpoint import load_checkpoint

from .run_events import events_of
from .train_models import blobs, digits, digits_cnn, loader, mlp


def test_cnn_on_digits_reaches_95_percent():
    torch.manual_seed(0)
    train, val = digits()
    model = digits_cnn()
    result = fit(
        model,
        torch.optim.AdamW(model.parameters(), 3e-3),
        loader(train, 64),
        loss_fn=nn.CrossEntropyLoss(),
        val_data=loader(val, 256, shuffle=False),
        epochs=8,
        seed=0,
    )
    assert result.status == "succeeded"
    assert result.val_acc >= 0.95, result.history[-1]
    assert result.history[-1]["loss"] < result.history[0]["loss"] / 5
    assert result.step == 8 * math.ceil(1500 / 64) and result.epoch == 8
    assert RunStore().get(result.run_id).status == "succeeded"
    assert not RunFiles.of(result.run_id).loss_plot.exists(), "the engine draws nothing: whoever shows it does"


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_cpu_autocast_trains(amp):
    torch.manual_seed(0)
    model = mlp()
    result = fit(
        model,
        torch.optim.AdamW(model.parameters(), 1e-2),
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=4,
        amp=amp,
        log_every=2,
    )
    start = events_of(result, "start")[0]
    assert start["amp"] == amp and start["device"] == "cpu"
    losses = [row["loss"] for row in result.history]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] * 0.7


def test_auto_precision_is_off_on_cpu():
    model = mlp()
    result = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    assert events_of(result, "start")[0]["amp"] == "off"


def _linear_after(batch_size: int, accum: int, steps: int) -> torch.Tensor:
    torch.manual_seed(0)
    x, y = torch.randn(64, 5, dtype=torch.float64), torch.randn(64, 1, dtype=torch.float64)
    model = nn.Linear(5, 1).double()
    fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader(torch.utils.data.TensorDataset(x, y), batch_size, shuffle=False),
        loss_fn=nn.MSELoss(),
        accum=accum,
        max_steps=steps,
        save_ckpts=False,
    )
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_accumulating_n_micro_batches_equals_one_big_batch():
    big = _linear_after(batch_size=32, accum=1, steps=2)
    accumulated = _linear_after(batch_size=8, accum=4, steps=2)
    assert torch.allclose(big, accumulated, atol=1e-12)
    assert not torch.allclose(big, _linear_after(batch_size=8, accum=1, steps=2))


def test_a_short_last_accumulation_group_is_averaged_over_its_size():
    """64 samples in batches of 8 with accum 3: groups of 3, 3, 2 micro-batches; the last step
    must equal a batch of 16, not 2/3 of one."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 5, dtype=torch.float64), torch.randn(64, 1, dtype=torch.float64)

    def run(batch_sizes_and_accum):
        model = nn.Linear(5, 1).double()
        torch.nn.init.zeros_(model.weight), torch.nn.init.zeros_(model.bias)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch_size, accum, start, stop in batch_sizes_and_accum:
            part = torch.utils.data.TensorDataset(x[start:stop], y[start:stop])
            fit(
                model, opt, loader(part, batch_size, shuffle=False), loss_fn=nn.MSELoss(), accum=accum, save_ckpts=False
            )
        return model.weight.detach().clone()

    grouped = run([(8, 3, 0, 64)])
    plain = run([(24, 1, 0, 48), (16, 1, 48, 64)])
    assert torch.allclose(grouped, plain, atol=1e-12)


def test_clipping_bounds_the_update_and_reports_the_norm():
    torch.manual_seed(0)
    model = mlp()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    result = fit(
        model,
        torch.optim.SGD(model.parameters(), lr=1.0),
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        clip=0.01,
        max_steps=1,
        save_ckpts=False,
    )
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (after - before).norm() <= 0.01 + 1e-6
    assert events_of(result, "step")[0]["grad_norm"] > 0.01  # the norm before clipping


def _resumable_setup(fast: bool):
    torch.manual_seed(1)
    model = mlp(dropout=0.3)
    optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    return model, optimizer, scheduler, loader(blobs(64), batch_size=8, shuffle=True), fast


def _train(setup, **options):
    model, optimizer, scheduler, data, fast = setup
    return fit(
        model,
        optimizer,
        data,
        loss_fn=nn.CrossEntropyLoss(),
        scheduler=scheduler,
        epochs=5,
        seed=3,
        fast_data=fast,
        **options,
    )


@pytest.mark.parametrize("fast", [True, False], ids=["tensor-fast-path", "dataloader"])
def test_resume_mid_epoch_gives_identical_weights(fast):
    """8 batches an epoch: step 10 is inside epoch 2, so the data order, dropout RNG,
    optimizer, scheduler and position in the epoch must all be restored."""
    straight = _resumable_setup(fast)
    _train(straight, max_steps=20)
    first = _resumable_setup(fast)
    part = _train(first, max_steps=10)
    assert part.step == 10 and load_checkpoint(part.last_checkpoint)["batch_in_epoch"] == 2
    second = _resumable_setup(fast)  # a fresh process would start from freshly built objects
    rest = _train(second, max_steps=20, resume=part.last_checkpoint)
    assert rest.step == 20 and events_of(rest, "start")[0]["start_step"] == 10
    for a, b in zip(straight[0].state_dict().values(), second[0].state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_nan_loss_stops_with_step_and_last_good_checkpoint():
    calls = {"n": 0}

    def train_step(model, batch):
        calls["n"] += 1
        x, y = batch
        loss = nn.functional.cross_entropy(model(x), y)
        return loss * float("nan") if calls["n"] == 7 else loss

    model = mlp()
    with pytest.raises(TrainingFailed) as failure:
        fit(
            model,
            torch.optim.SGD(model.parameters(), 0.1),
            loader(blobs()),
            train_step=train_step,
            epochs=3,
            ckpt_every=5,
            log_every=4,
        )
    result = failure.value.result
    assert result.status == "failed" and result.step == 7  # one step count: the NaN's, not the log's (8)
    assert "Loss became nan at step 7" in result.message
    assert "step-00000005.pt (step 5)" in result.message and "--clip" in result.message
    assert failure.value._render_traceback_() == [f"TrainingFailed: {result.message}"]
    assert events_of(result, "end")[-1]["status"] == "failed"
    assert RunStore().get(result.run_id).status == "failed"
    assert not any(e["step"] > 5 for e in events_of(result, "ckpt"))


class StopAfter:
    """A monitor that presses Stop once it has seen ``steps`` optimizer steps logged."""

    interval = 0.0

    def __init__(self, stop: StopSignal, steps: int):
        self.stop, self.steps, self.polls = stop, steps, 0

    def feed(self, events):
        if any(e["kind"] == "step" and e["step"] >= self.steps for e in events):
            self.stop.request()

    def poll(self):
        self.polls += 1


def test_stop_request_ends_at_a_step_with_a_checkpoint_that_resumes():
    stop = StopSignal()
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    result = fit(
        model,
        optimizer,
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=50,
        log_every=1,
        monitor=StopAfter(stop, 12),
        stop=stop,
    )
    assert result.status == "stopped" and result.step == 12
    assert "Stopped at step 12/400" in result.message and "--resume last" in result.message
    assert load_checkpoint(result.last_checkpoint)["step"] == 12
    assert RunStore().get(result.run_id).status == "stopped"
    resumed = fit(
        model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), epochs=2, resume=result.last_checkpoint
    )
    assert resumed.status == "succeeded" and resumed.step == 16


def test_events_carry_the_contract_fields_and_are_written_per_log_not_per_step():
    model = mlp()
    result = fit(
        model,
        torch.optim.SGD(model.parameters(), 0.1),
        loader(blobs(512)),
        loss_fn=nn.CrossEntropyLoss(),
        val_data=loader(blobs(64, seed=1), shuffle=False),
        epochs=2,
        log_every=8,
        batch_size=None,
    )
    kinds = [e["kind"] for e in events_of(result)]
    assert kinds[0] == "start" and kinds[-1] == "end"
    start = events_of(result, "start")[0]
    assert {"total_steps", "epochs", "nproc", "batch_size", "amp", "device", "params"} <= set(start)
    assert start["total_steps"] == 32 and start["params"] == sum(p.numel() for p in model.parameters())
    steps = events_of(result, "step")
    assert [e["step"] for e in steps] == [8, 16, 24, 32]
    assert {"step", "epoch", "loss", "lr", "samples_per_s", "data_wait"} <= set(steps[0])
    assert {"step", "epoch", "loss", "accuracy"} <= set(events_of(result, "val")[0])
    assert {"step", "path"} <= set(events_of(result, "ckpt")[0])
    assert events_of(result, "end")[0]["status"] == "succeeded"


def test_adaptive_log_interval_starts_at_one_step_and_grows():
    model = mlp()
    result = fit(
        model,
        torch.optim.SGD(model.parameters(), 0.1),
        loader(blobs(2048)),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=3,
        log_interval_s=0.2,
    )
    logged = [e["step"] for e in events_of(result, "step")]
    assert logged[0] == 1 and len(logged) < result.step / 4


def test_dict_batches_with_model_loss_and_with_labels():
    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, inputs, labels=None):
            logits = self.net(inputs)
            return {"logits": logits, "loss": nn.functional.cross_entropy(logits, labels)}

    data = [{"inputs": x, "labels": y} for x, y in loader(blobs(), shuffle=False)]
    model = WithLoss()
    result = fit(model, torch.optim.AdamW(model.parameters(), 1e-2), data, val_data=data, epochs=3)
    assert result.history[-1]["val_acc"] > 0.8

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, inputs):
            return self.net(inputs)

    plain = Plain()
    result = fit(plain, torch.optim.AdamW(plain.parameters(), 1e-2), data, loss_fn=nn.CrossEntropyLoss(), epochs=3)
    assert result.history[-1]["loss"] < result.history[0]["loss"]


def test_scheduler_steps_every_optimizer_step():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), 1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    result = fit(
        model,
        optimizer,
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        scheduler=scheduler,
        max_steps=4,
        log_every=1,
        save_ckpts=False,
    )
    assert [round(row["lr"], 4) for row in result.history] == [0.5, 0.3333, 0.25, 0.2]


def test_compiled_model_trains_and_checkpoints_without_compile_prefixes(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch.manual_seed(0)
    model = mlp()
    result = fit(
        model,
        torch.optim.AdamW(model.parameters(), 1e-2),
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=3,
        compile=True,
    )
    assert result.status == "succeeded" and result.history[-1]["loss"] < result.history[0]["loss"]
    assert set(load_checkpoint(result.last_checkpoint)["model"]) == set(mlp().state_dict())


def test_input_bound_advice_names_the_loader_settings_for_this_machine():
    from jiyu_magics.train.end_messages import input_bound_advice

    loader_with_no_workers = loader(blobs())
    advice = input_bound_advice(0.45, "cuda", loader_with_no_workers, cpu_count=16, local_world_size=2)
    assert advice.startswith("The GPU waits for data 45% of the time (now num_workers=0).")
    for setting in ("num_workers=7", "pin_memory=True", "persistent_workers=True", "prefetch_factor=4"):
        assert setting in advice
    assert input_bound_advice(0.15, "cuda", loader_with_no_workers) is None
    assert input_bound_advice(0.9, "cpu", loader_with_no_workers) is None, (
        "on CPU the loader competes for the same cores"
    )


def test_the_time_limit_overrides_a_sigterm_but_no_other_stop_reason():
    """torchrun's agent may pass a SIGTERM to the ranks beside the scheduler's USR1: the stop is
    still the time limit's (the job requeues and resumes); a user's own stop keeps its reason."""
    from jiyu_magics.train.stop_signal import INTERRUPT, TERMINATE, TIME_LIMIT

    for first, then, reason in [
        (TERMINATE, TIME_LIMIT, TIME_LIMIT),
        (TIME_LIMIT, TERMINATE, TIME_LIMIT),
        (INTERRUPT, TIME_LIMIT, INTERRUPT),
    ]:
        stop = StopSignal()
        stop.request(first)
        stop.request(then)
        assert (stop.requested, stop.reason) == (True, reason)
