"""Text and HTML renderings of core data, shared by the magics, the CLI and the widgets.

Plain functions from data to strings: no IPython, no terminal handling, so every view draws the
same table from the same snapshot record.
"""
