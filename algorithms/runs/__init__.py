"""What a run stands on, below the learning code: the run folder and its checkpoints
(format, atomic writes, what of the learner they hold), seeds, torchrun/FSDP2 helpers and
worker launch, SIGTERM handling, what a run prints, and freed memory given back. Imports
only :mod:`algorithms.config` from the rest of ``algorithms``."""
