"""Output comparison for stdin/stdout cases: one definition for the server and the host.

Stdlib only: copied into the images beside the fork server.
"""


def normalize_output(text: str) -> str:
    """Trailing white space of every line and trailing blank lines do not count."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def outputs_match(actual: str, expected: str) -> bool:
    return normalize_output(actual) == normalize_output(expected)
