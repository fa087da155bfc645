"""Checkpoints of a real run: what lies on disk and how it is written crash-safe (``layout``), and taking
a driver's state into a checkpoint / restoring a driver from one (``save_restore``)."""
