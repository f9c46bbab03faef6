"""GRPO (and PPO beside it) on verifiable environments; see trainer/README.md for how a batch flows.

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig
    cfg = GRPOConfig.from_dict(yaml.safe_load(open("run.yaml")))
    build_trainer(cfg).train()      # metrics.jsonl, samples.jsonl, plots, checkpoints, model/

``config`` (the run config tree, ``RunConfig`` alias ``GRPOConfig``), ``grpo`` / ``ppo`` (each
algorithm's step), ``run`` (``Run``: the loop, state, checkpoints, evaluation), ``parts`` (what
a run is built from), ``consensus`` (decisions every process takes together), ``sampling``
(prompts and scored rollouts), ``select/`` (pass-rate memory, difficulty frontier, answer probe),
``learn/`` (placement, GRPO's micro-batch loss, the learner), ``algo/`` (pure formulas),
``rollout/`` (transformers and vLLM backends, multi-turn, the async pipeline, when weights sync),
``serve/`` (``proctor serve``), ``records`` (the plain data between phases), ``checkpoint`` and
``state_codec`` (checkpoints as JSON + safetensors), ``metrics``, ``metric_schema``,
``step_row``, ``report``.
Nothing is imported here, so ``proctor.trainer.config`` loads without torch.
"""
