"""Procedural task generators: arithmetic, countdown, reasoning-gym."""
