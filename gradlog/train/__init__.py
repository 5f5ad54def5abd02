"""The training loop behind ``gradlog train``, in parts a reader finds by name:

* :mod:`.config` -- the flags, the ``--config`` TOML and a resumed run's record, merged and
  validated by one mechanism; ``run.toml``;
* :mod:`.example` -- the built-in example or FILE.py, and its ``build(config)``;
* :mod:`.loop` -- epochs, batches, validation and the standard metrics;
* :mod:`.checkpoints` -- what a checkpoint holds, saving it, and what ``--resume`` continues;
* :mod:`.signals` -- the one owner of SIGINT/SIGTERM;
* :mod:`.trainer` -- all of it put together, from options to exit status;
* :mod:`.summary`, :mod:`.console`, :mod:`.logged` -- what it prints and logs besides.

What differs between gradlog's own models and PyTorch's is asked of the run's engine
(``run.engine``, :mod:`gradlog.engines`), chosen from the model ``build(config)`` returns.
"""

from .config import DEFAULT_PLUGINS, Settings, TrainOptions
from .errors import Interrupted, UserError
from .example import load_example
from .loop import accuracy
from .trainer import train

__all__ = ["TrainOptions", "Settings", "UserError", "Interrupted", "DEFAULT_PLUGINS", "train",
           "load_example", "accuracy"]
