"""Where a real run computes and whether it fits: each role's device and the Ray GPU plan
(``device_map``), and the memory check from the models' shapes before anything is loaded (``memory_fit``)."""
