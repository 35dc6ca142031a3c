"""``python -m voiced.doctor``."""

from voiced.doctor import main

raise SystemExit(main())
