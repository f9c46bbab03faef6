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


def step_failed(step: dict) -> bool:
    """Whether a run can only be judged failed: where ``stop_on_first_failure`` stops.

    A run can pass only if it exited 0, with no signal and no limit hit, and (the
    tests run) it wrote back the nonce. Whether a case's output matched only the host
    knows (the expected output never enters the container). The host's verdict may
    still fail a run that this lets through, never the other way round.
    """
    clean = (step["exit_code"] == 0 and step["signal"] is None and not step["timed_out"]
             and not step["output_limit"] and not step["oom"])
    if step["kind"] == "case":
        return not clean
    return not (clean and step["marker_ok"])
