"""The ``proctor`` command line: train, plan, report, serve, envs, sandbox, images, tiny-model, doctor; see ``proctor --help``."""
