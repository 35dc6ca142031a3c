"""``python -m voiced.models``: the model store's command line."""

from voiced.models.cli import main

raise SystemExit(main())
