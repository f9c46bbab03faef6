"""GRPO (and PPO beside it) on verifiable environments; see trainer/README.md for how a batch flows.

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig
    cfg = GRPOConfig.from_dict(yaml.safe_load(open("run.yaml")))
    build_trainer(cfg).train()      # metrics.jsonl, samples.jsonl, plots, checkpoints, model/

``config`` (the run config tree), ``grpo`` / ``ppo`` (the trainers), ``run`` (the parts they
are built from and the loop), ``sampling`` (prompts and scored rollouts), ``learner`` (the
optimizer step), ``objective`` (GRPO's micro-batch loss), ``algo`` (pure formulas),
``rollout`` (transformers and vLLM backends), ``serve`` (``proctor serve``), ``records``
(the plain data between phases), ``checkpoint``, ``metrics``, ``step_row``, ``report``.
Nothing is imported here, so ``proctor.trainer.config`` loads without torch.
"""
