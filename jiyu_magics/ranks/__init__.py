"""Ranks pools (``%ranks``): processes a kernel keeps across cells and through failures, as runs
of the one lifecycle. The kernel's side: ``pool`` (start, requests, ranks and their states),
``agent`` (what a failure, an interrupt, a hang or a death does), ``requests``, ``reports``,
``placement`` (``%%train --nproc`` on a pool), ``allocation`` (a pool on a Slurm allocation),
``launch``. The rank's side: ``worker``, ``rank_shell``, ``supervisor``. Between them:
``protocol`` and ``channel``. The rank's process group, in generations: ``train.pool_group``."""
