"""The ``proctor`` command line: ``proctor images ...``, ``proctor doctor``; see ``proctor --help``."""
