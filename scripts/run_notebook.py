"""Execute a notebook headless in a real kernel and print what a person would read in it.

Used by ``make demo``. Magics draw text (``JIYU_UI=text``) so the terminal shows tables and
progress lines; images are saved next to the executed notebook and their paths printed.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument(
        "--out", type=Path, default=Path("demo-output"), help="folder for the executed notebook and images"
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("JIYU_UI", "text")
    started = time.time()
    client = NotebookClient(
        nb,
        timeout=args.timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(args.notebook.parent.resolve())}},
    )
    try:
        client.execute()
    finally:
        executed = args.out / args.notebook.name
        nbformat.write(nb, executed)
        show(nb, args.out)
        print(f"\nexecuted notebook: {executed} ({time.time() - started:.0f} s)")
    return 0


def show(nb, out: Path) -> None:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        print(f"\n\x1b[1mIn [{index}]:\x1b[0m " + cell.source.strip().splitlines()[0] if cell.source.strip() else "")
        for n, output in enumerate(cell.get("outputs", [])):
            if output.output_type == "stream":
                sys.stdout.write(output.text)
            elif output.output_type == "error":
                print(f"{output.ename}: {output.evalue}")
            elif "data" in output:
                if "image/png" in output.data:
                    path = out / f"cell{index}_{n}.png"
                    path.write_bytes(base64.b64decode(output.data["image/png"]))
                    print(f"[image saved: {path}]")
                elif "text/plain" in output.data:
                    print(output.data["text/plain"])


if __name__ == "__main__":
    raise SystemExit(main())
