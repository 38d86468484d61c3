"""The bottom layer: GPU snapshots, the doctor, the run store and the event log.

Nothing here imports torch, IPython, ipywidgets or tornado, so every view (magic, CLI,
server, widget) can use it in any process, including a Jupyter server without a GPU driver.
"""
