"""JupyterLab settings the image enforces; jiyu-entrypoint passes this file with ``--config``.

An explicitly named config file loads after every ``jupyter_server_config`` on the config path
(``~/.jupyter`` included), so a ``c.IdentityProvider.token = ""`` there cannot turn authentication
off. The token is read from the environment and then removed from it, so kernels and terminals
(and a notebook printing ``os.environ``) never see it.
"""

import os

_token = os.environ.pop("JUPYTER_TOKEN", "")
if not _token:
    raise SystemExit("jiyu: refusing to start JupyterLab without a token (JUPYTER_TOKEN is empty)")

c.IdentityProvider.token = _token  # noqa: F821 - `c` is the config object traitlets provides
