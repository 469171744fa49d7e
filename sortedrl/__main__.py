"""``python -m sortedrl``: the ``sortedrl`` command, for an environment whose scripts are not on
PATH."""

from sortedrl.console import main

main()
