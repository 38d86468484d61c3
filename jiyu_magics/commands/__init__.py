"""Subcommands of the ``jiyu`` CLI, one module per concern, each with ``add_commands``."""
