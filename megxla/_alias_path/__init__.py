"""Directory put on ``sys.path`` / ``PYTHONPATH`` by :func:`megxla._alias.install` (see there); it holds only the
``megengine`` package that lets child processes inherit the alias."""
