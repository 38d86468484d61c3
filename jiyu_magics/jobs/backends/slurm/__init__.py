"""Runs on Slurm: options, the batch script, the client commands, the job states in the
lifecycle's words, and the placement that submits, follows and cancels."""
