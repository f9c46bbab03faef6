"""Code environments: extract a program from a completion, judge it in the sandbox.

    from proctor.envs.code import CodeVerifier, humaneval_source
    source = humaneval_source()
    with CodeVerifier() as verifier:
        verdicts = verifier.verify_batch(tasks, completions)   # one sandbox run_many
"""

from .extract import extract_code, fenced_blocks
from .humaneval_x import humaneval_x_source
from .tasks import code_task_from_row, humaneval_source, humaneval_task, mbpp_style_source
from .verifier import CodeVerifier

__all__ = ["CodeVerifier", "code_task_from_row", "extract_code", "fenced_blocks", "humaneval_source",
           "humaneval_task", "humaneval_x_source", "mbpp_style_source"]
