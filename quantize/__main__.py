"""``python -m quantize``: the voiced-quantize command line."""

from quantize.cli import main

raise SystemExit(main())
