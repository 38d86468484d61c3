"""Runs in the user's own tracker (TensorBoard, MLflow), fed from the run's event log.

Training never talks to a tracker: rank 0 appends its events to ``runs/<id>/events.jsonl``
as always, and a follower outside the training loop (``follower``) tails that log by byte
offset and writes what it reads through the tracker's own writer or client: TensorBoard's
``EventFileWriter``, MLflow's ``MlflowClient``. The same code exports a finished run
(``export``) from the offset the tracker has already seen, so a second export adds nothing.

Which process runs the follower is the run owner's choice (a thread of the kernel or of a job's
supervisor, a process of its own for an in-kernel ``fit`` or inside a Slurm allocation); see
``docs/guide/trackers.md``. ``tensorboard`` and ``mlflow`` are optional extras, imported only
in ``sinks`` and only when a destination of theirs is written: this package costs nothing to
import (``destinations`` is read by the magics at ``%load_ext`` time).
"""
