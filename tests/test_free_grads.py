"""``--free-grads`` (``TrainerLayout.free_grads``): where the trainer's state stays on the GPUs while the engine
generates, gradients freed after each update (verl's FSDP actor: ``zero_grad()`` at the end of ``update_policy``)
take turns with the engine as the activations do; the verl reader sets it for an FSDP actor that keeps its state."""

from __future__ import annotations

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.placement import colocated_placement
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.memory.pool_memory import ALWAYS, OTHER
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import memory_report

from framework_helpers import pairs


def _train_roles(free: bool):
    cfg = SimConfig(batch=16, steps=1, gpu="h100-sxm", actor="qwen2.5-7b", placement=colocated_placement(8),
                    algorithm=Algorithm("grpo", n=4, reward="rule", kl=False), max_response=2048,
                    offload_train_state=False, train_memory=TrainMemoryConfig(zero_stage=3, recompute="full"),
                    trainer=TrainerLayout(free_grads=free))
    return {r.phase: r for r in memory_report(cfg).pools[0].roles if r.role == "train"}


def test_freed_gradients_take_turns_with_the_engine():
    held, freed = _train_roles(False), _train_roles(True)
    grads = held[ALWAYS].grads
    assert grads > 0 and held[OTHER].grads == 0
    assert freed[ALWAYS].grads == 0 and freed[OTHER].grads == grads and "gradients" in freed[OTHER].note
    assert freed[ALWAYS].weights == held[ALWAYS].weights and freed[ALWAYS].optimizer == held[ALWAYS].optimizer


VERL = ("data.train_batch_size=32 actor_rollout_ref.rollout.n=4 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct "
        "algorithm.adv_estimator=grpo actor_rollout_ref.actor.ppo_mini_batch_size=16 ")


def test_the_verl_reader_frees_an_fsdp_actors_gradients_where_its_state_stays():
    assert "--free-grads" in pairs(translate_verl(VERL).args)  # verl's default: no offload
    offloaded = translate_verl(VERL + "actor_rollout_ref.actor.fsdp_config.param_offload=True")
    assert "--free-grads" not in pairs(offloaded.args)
    megatron = translate_verl(VERL + "actor_rollout_ref.actor.strategy=megatron")
    assert "--free-grads" not in pairs(megatron.args)  # Megatron's gradient buffer is persistent
    assert TrainerLayout(free_grads=True).plain().free_grads  # a search's layouts keep it
