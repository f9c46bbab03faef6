"""A new verifiable environment in under 30 lines: make a word into a palindrome.

    proctor envs check examples/envs/palindrome_env.py:make_env
"""

import gymnasium

from proctor.envs import ListSource, Task, VerifiableEnv, Verifier, exact_verdict
from proctor.envs.text import final_text

WORDS = ["race", "level", "abc", "noon", "step", "top", "radar", "ab"]


class PalindromeVerifier(Verifier):
    def verify(self, task: Task, completion: str):
        answer = final_text(completion).strip().lower()
        ok = answer.startswith(task.data["word"]) and answer == answer[::-1]
        return exact_verdict(ok, info={"extracted": answer}, feedback=None if ok else f"{answer!r} is not it")


def make_env(**kwargs) -> VerifiableEnv:
    tasks = [Task(id=w, prompt=f"Extend '{w}' into a palindrome. Answer in <answer></answer>.", data={"word": w})
             for w in WORDS]
    reference = lambda t: f"<answer>{t.data['word'] + t.data['word'][-2::-1]}</answer>"  # noqa: E731
    return VerifiableEnv(ListSource(tasks, "palindromes"), PalindromeVerifier(), reference=reference, **kwargs)


gymnasium.register("proctor/Palindrome-v0", entry_point=make_env)
