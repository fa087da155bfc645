"""What an operation costs: the roofline cost model, the op-cost layer and its tables, the trainer's layout and time per pass, weight sync, sleep/wake, expert parallelism."""
