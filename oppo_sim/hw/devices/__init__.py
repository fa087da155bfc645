"""The devices: GPU table and datasheet YAML specs, the hardware a run prices on (links, collectives' latency)."""
