"""Dockerfiles for the sandbox images; built by ``proctor images build``."""
