"""Ranks pools (``%ranks``): torchrun workers a kernel keeps across cells, as runs of the one
lifecycle. ``channel`` (the kernel's signed ZMQ link to its ranks), ``pool`` (start, requests,
end), ``placement`` (``%%train --nproc`` on a pool). The ranks' side is ``magics.ranks_worker``."""
