"""Which objects ``%%train`` trains, and where each one came from.

The required objects (model, optimizer, training data) are looked up by name. The optional
ones are where leftovers from earlier cells did harm without a word: a ``loss_fn`` replaced a
model's own ``.loss``, an old ``val_loader`` was validated and reported as this run's accuracy,
a scheduler of another optimizer was stepped. So an optional object comes from this cell's
body, or from the notebook's namespace only where it fits the run (a scheduler must step the
optimizer being trained), and every one taken from the namespace is named in the run's header:
``from the notebook: val_loader (In [7])``. ``--loss-fn NONE``, ``--no-val`` and the like leave
one out.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

# The objects training takes from the notebook: option -> (default variable, required, what it holds)
OBJECTS = {
    "model": ("model", True, "the model"),
    "optimizer": ("optimizer", True, "the optimizer"),
    "train_loader": ("train_loader", True, "the training data"),
    "val_loader": ("val_loader", False, "validation data"),
    "loss_fn": ("loss_fn", False, "loss_fn(outputs, targets)"),
    "scheduler": ("scheduler", False, "an LR scheduler, stepped as --scheduler-interval says"),
    "train_step": (
        "train_step",
        False,
        "train_step(model, batch) -> loss, for batches that are not (inputs, targets) or dicts",
    ),
}
OPTIONAL = tuple(option for option, (_, required, _) in OBJECTS.items() if not required)
FIT_ARGUMENT = {"train_loader": "train_data", "val_loader": "val_data"}
NONE = "NONE"  # --loss-fn NONE: use no loss_fn, whatever the notebook defines


@dataclass
class Chosen:
    """The objects for ``fit`` (by option) and what the run's header says about their origin."""

    objects: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)  # option -> the variable it came from
    from_notebook: list[str] = field(default_factory=list)  # "val_loader (In [7])"
    left_out: list[str] = field(default_factory=list)  # "scheduler (In [3]), which steps another optimizer"

    def fit_arguments(self) -> dict[str, Any]:
        return {FIT_ARGUMENT.get(option, option): value for option, value in self.objects.items()}

    def note(self) -> str | None:
        """The header's line, or None when every optional object came from this cell."""
        parts = []
        if self.from_notebook:
            parts.append("from the notebook: " + ", ".join(self.from_notebook))
        if self.left_out:
            parts.append("left out: " + ", ".join(self.left_out))
        return "; ".join(parts) or None


def variable(args: Namespace, option: str) -> str | None:
    """The variable an option names (as given, else its default); None when opted out."""
    given = getattr(args, option)
    if given == NONE or (option == "val_loader" and getattr(args, "no_val", False)):
        return None
    return given or OBJECTS[option][0]


def watched(args: Namespace) -> list[str]:
    """The optional objects' variables: the magic notes which of them the cell body rebinds."""
    return [name for name in map(lambda option: variable(args, option), OPTIONAL) if name]


def identities(namespace: dict, names: list[str]) -> dict[str, int]:
    """What each name holds, by identity only: holding the objects themselves would keep an old
    model's parameters alive (a scheduler holds its optimizer) while the body builds a new one."""
    return {name: id(namespace.get(name)) for name in names}


def rebound(namespace: dict, before: dict[str, int]) -> frozenset[str]:
    return frozenset(name for name, ident in before.items() if id(namespace.get(name)) != ident)


def choose(
    args: Namespace,
    namespace: dict,
    fresh: frozenset[str] = frozenset(),
    defined_in: Callable[[str], int | None] = lambda name: None,
) -> Chosen:
    """The objects to train, from the namespace. ``fresh``: the variables this cell's body
    (re)bound; ``defined_in``: the execution count of the cell that last bound a variable.
    Raises a one-line ``UsageError`` for a missing object or one that does not fit."""
    if getattr(args, "no_val", False) and args.val_loader not in (None, NONE):
        raise UsageError("--no-val and --val-loader conflict: choose one")
    chosen = Chosen()
    for option, (_, required, _) in OBJECTS.items():
        name = variable(args, option)
        if name is not None and namespace.get(name) is not None:
            chosen.objects[option], chosen.variables[option] = namespace[name], name
        elif name is not None and (getattr(args, option) or required):
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"no {option} named {name!r} in the notebook: define it in the cell or pass {flag} NAME")
    _one_loss(chosen, args, fresh)
    _scheduler_of_this_optimizer(chosen, args, fresh, defined_in)
    chosen.from_notebook = [
        _origin(chosen.variables[option], defined_in)
        for option in OPTIONAL
        if option in chosen.objects and chosen.variables[option] not in fresh
    ]
    return chosen


def _one_loss(chosen: Chosen, args: Namespace, fresh: frozenset[str]) -> None:
    """``loss_fn`` and ``train_step`` both compute the loss: a flag chooses, else the one this
    cell defined; two of equal standing are refused."""
    objects, variables = chosen.objects, chosen.variables
    if "loss_fn" not in objects or "train_step" not in objects:
        return
    if args.loss_fn and args.train_step:
        raise UsageError("--loss-fn and --train-step conflict: train_step computes the loss itself")
    new = [option for option in ("loss_fn", "train_step") if variables[option] in fresh]
    if args.loss_fn or args.train_step:
        keep = "loss_fn" if args.loss_fn else "train_step"
    elif len(new) == 1:
        keep = new[0]
    else:
        raise UsageError(
            "both loss_fn and train_step are defined: pass --loss-fn or --train-step to choose (or --loss-fn NONE)"
        )
    drop = "train_step" if keep == "loss_fn" else "loss_fn"
    objects.pop(drop), variables.pop(drop)


def _scheduler_of_this_optimizer(
    chosen: Chosen, args: Namespace, fresh: frozenset[str], defined_in: Callable[[str], int | None]
) -> None:
    """A scheduler steps one optimizer. One that steps another (a leftover of an earlier run)
    would raise mid-run, or silently change the learning rate: a leftover is left out (and
    named), one this cell or ``--scheduler`` chose is refused."""
    scheduler = chosen.objects.get("scheduler")
    if scheduler is None or getattr(scheduler, "optimizer", chosen.objects["optimizer"]) is chosen.objects["optimizer"]:
        return
    name = chosen.variables["scheduler"]
    if args.scheduler or name in fresh:
        raise UsageError(
            f"{name} steps another optimizer, not {chosen.variables['optimizer']}: create it from "
            f"this one (e.g. OneCycleLR({chosen.variables['optimizer']}, ...)) or pass --scheduler NONE"
        )
    chosen.objects.pop("scheduler"), chosen.variables.pop("scheduler")
    chosen.left_out.append(f"{_origin(name, defined_in)}, which steps another optimizer")


def _origin(name: str, defined_in: Callable[[str], int | None]) -> str:
    cell = defined_in(name)
    return f"{name} (In [{cell}])" if cell is not None else name
