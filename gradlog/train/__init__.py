"""The training loop behind ``gradlog train``, in parts a reader finds by name:

* :mod:`.config` -- the flags, the ``--config`` TOML and a resumed run's record, merged and
  validated by one mechanism; ``run.toml``;
* :mod:`.example` -- the built-in example or FILE.py, and its ``build(config)``;
* :mod:`.loop` -- epochs, batches, validation and the standard metrics;
* :mod:`.checkpoints` -- what a checkpoint holds, saving it, and what ``--resume`` continues;
* :mod:`.signals` -- the one owner of SIGINT/SIGTERM;
* :mod:`.built` -- what ``build(config)`` returns, checked and named (``Built``);
* :mod:`.preparation` -- a command checked, its example built, before anything is written;
* :mod:`.trainer` -- one process's run, from its run directory to its end (it raises);
* :mod:`.launch` and :mod:`.parallel` -- ``--nproc N``'s ranks, and one rank's part;
* :mod:`.command` -- the command: launch or train here, and the exit status of each ending;
* :mod:`.runs` -- what a run directory holds (checkpoints, ``run.toml``);
* :mod:`.summary`, :mod:`.console`, :mod:`.logged` -- what it prints and logs besides.

What differs between gradlog's own models and PyTorch's is asked of the run's engine
(``run.engine``, :mod:`gradlog.engines`), chosen from the model ``build(config)`` returns.
"""

from .command import train
from .config import DEFAULT_PLUGINS, Settings, TrainOptions
from .errors import Interrupted, UserError
from .example import load_example
from .loop import accuracy

__all__ = ["TrainOptions", "Settings", "UserError", "Interrupted", "DEFAULT_PLUGINS", "train",
           "load_example", "accuracy"]
