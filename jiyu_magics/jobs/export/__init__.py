"""Notebook → job script: the exporter, its cell rules, the script's text and ``-p`` parameters."""
