"""oppo_sim: trace-driven discrete-event simulator of PPO-RLHF pipelines under overlap policies."""
