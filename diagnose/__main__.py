"""`python -m diagnose` = the `swiftdoc` CLI."""
import sys

from diagnose.cli import main

sys.exit(main())
