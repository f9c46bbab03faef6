"""``proctor plan``: GPU memory and rollout tokens of an RL step, PPO beside GRPO, before renting GPUs."""

from .costs import (StateCost, TrainingState, logit_value_bytes, logprob_bytes, state_cost, training_state,
                    weight_bytes)
from .inputs import PlanInput
from .memory import AlgorithmPlan, Component, Plan, activation_bytes, plan, plan_algorithm
from .model_shape import ModelShape, load_shape, model_shape_from_model, shape_from_config, shape_from_params
from .render import human_bytes, plan_dict, render

__all__ = [
    "AlgorithmPlan", "Component", "ModelShape", "Plan", "PlanInput", "StateCost", "TrainingState",
    "activation_bytes", "human_bytes", "load_shape", "logit_value_bytes", "logprob_bytes", "model_shape_from_model",
    "plan", "plan_algorithm", "plan_dict", "render", "shape_from_config", "shape_from_params", "state_cost",
    "training_state", "weight_bytes",
]
