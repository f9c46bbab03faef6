"""Gymnasium-style verifiable environments (built in a later issue)."""
