"""One module per subcommand; each exposes `add_arguments(parser)` and `run(args) -> int`.

Shared helpers for reading inputs live in `common`.
"""
