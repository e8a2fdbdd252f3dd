"""``python -m onnxsight.zoo run|list|report``: the zoo command line without the main CLI."""

from __future__ import annotations

import sys

from onnxsight.zoo.cli import main

sys.exit(main(["zoo", *sys.argv[1:]]))
