"""``python -m ticktensor.cli``: same as the ``ticktensor`` command."""

from ticktensor.cli import main

raise SystemExit(main())
