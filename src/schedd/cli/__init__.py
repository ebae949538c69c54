"""Command-line entry points: ``schedctl`` (:mod:`schedd.cli.schedctl`) and ``schedd``."""
