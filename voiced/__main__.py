"""``python -m voiced``: the same as the ``voiced`` command."""

from voiced.cli import main

raise SystemExit(main())
