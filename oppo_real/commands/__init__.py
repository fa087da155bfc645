"""The ``oppo-real`` sub-commands, one module each: ``add_parser(sub)`` and its ``cmd_*`` function."""
