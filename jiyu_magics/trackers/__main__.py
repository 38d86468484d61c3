"""``python -m jiyu_magics.trackers follow RUN_ID --track ...``: a follower process (see ``follow_process``)."""

from __future__ import annotations

import sys

from .follow_process import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or argv[0] != "follow":
        print("usage: python -m jiyu_magics.trackers follow RUN_ID [--track DEST]... [--stdin | --until-ended]")
        sys.exit(2)
    sys.exit(main(argv[1:]))
