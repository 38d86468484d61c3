"""Other processes as jiyu sees them: facts read from ``/proc``, the processes that carry a run's
id, and the stop request a job's own process reads."""
