"""``python -m onnxsight``: the command line (see onnxsight.cli)."""

from __future__ import annotations

import sys

from onnxsight.cli import main

if __name__ == "__main__":
    sys.exit(main())
