"""The GRPO trainer (built in a later issue)."""
