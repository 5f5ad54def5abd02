"""The plugin contract: ``Plugin``, the ``Run`` plugins see, discovery, and control flow.

The contract is in ``base.py`` (what a plugin declares), ``run.py`` (what it gets),
``registrar.py`` (how it hooks in), ``dispatch.py`` (ordering and the failure policy),
``options.py`` (typed options and the ``-p`` grammar) and ``discovery.py`` (entry points).
"""

from .adapter import to_numpy
from .base import EVENTS, Plugin
from .discovery import GROUP, PluginInfo, discover, load, resolve_plugins
from .errors import (
    PluginAbort,
    PluginConfigError,
    PluginError,
    PluginLoadError,
    SkipStep,
    StopTraining,
)
from .options import parse_spec
from .run import Run
from .watch import watch

__all__ = ["Plugin", "Run", "EVENTS", "GROUP", "PluginInfo", "discover", "load",
           "resolve_plugins", "parse_spec", "watch", "to_numpy", "PluginAbort", "SkipStep",
           "StopTraining", "PluginError", "PluginConfigError", "PluginLoadError"]
