"""The Jupyter server extension behind the JupyterLab panel (see ``app.JiyuApp``).

Layer rules: no torch; GPUs through ``core.gpu`` (NVML) on a worker thread; the run store and
event logs through ``core``; job submission and stop through ``jiyu_magics.jobs``, imported
only when a request needs it.
"""
