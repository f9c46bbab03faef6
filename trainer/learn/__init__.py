"""The update: the policy prepared and placed (``placement``: LoRA, reference, FSDP2 on CPU,
DeepSpeed's config, optimizer and schedule), GRPO's micro-batch loss and the fixed log-probs
it needs (``objective``), and the ``Learner`` that accumulates micro-batches, clips, guards
against non-finite steps and steps the optimizer (``learner``). The formulas themselves are
``trainer/algo/``. Nothing is imported here.
"""
