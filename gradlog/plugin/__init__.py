"""The plugin contract: ``Plugin``, the ``Run`` plugins see, discovery, and control flow.

The contract is in ``base.py`` (what a plugin declares), ``run.py`` (the run) and ``view.py``
(each plugin's own view of it), ``registrar.py`` (how it hooks in), ``dispatch.py``
(ordering), ``policy.py`` (the one invocation path and the failure policy), ``passes.py``
(internal passes), ``options.py`` (typed options and the ``-p`` grammar) and
``discovery.py`` (entry points). What differs between engines is in ``gradlog.engines``.
"""

from .base import EVENTS, Plugin
from .discovery import GROUP, PluginInfo, discover, load, resolve_plugins
from .errors import (
    NOT_A_PLUGIN_FAILURE,
    PluginAbort,
    PluginConfigError,
    PluginError,
    PluginLoadError,
    SkipStep,
    StopTraining,
)
from .options import parse_spec
from .run import Run
from .view import PluginRun
from .watch import watch, watch_driven

__all__ = ["Plugin", "Run", "PluginRun", "EVENTS", "GROUP", "PluginInfo", "discover", "load",
           "resolve_plugins", "parse_spec", "watch", "watch_driven", "PluginAbort", "SkipStep",
           "StopTraining", "PluginError", "PluginConfigError", "PluginLoadError",
           "NOT_A_PLUGIN_FAILURE"]
