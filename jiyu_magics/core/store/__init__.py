"""The run store: one SQLite file (``jiyu.sqlite``) with a row per run and the GPU leases, its
repair from the run folders, and the rule that marks a run whose processes vanished ``lost``."""
