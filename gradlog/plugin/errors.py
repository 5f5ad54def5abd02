"""Control-flow signals and errors of the plugin contract.

``SkipStep`` and ``StopTraining`` are control flow, not failures; ``PluginAbort`` always ends
the run; ``PluginError`` reports a plugin's failure with where it happened.
"""

from __future__ import annotations


class SkipStep(Exception):
    """Raised in ``on_before_optimizer_step`` (or a step pre-hook): skip this optimizer step.

    The framework sets every ``.grad`` to None first, so parameters, momentum and Adam state
    are left untouched.
    """


class StopTraining(Exception):
    """Raised by a plugin to end training early and cleanly (exit status 0)."""


class PluginAbort(Exception):
    """Raised by a plugin to stop the run as failed; never swallowed by isolation."""


class PluginError(RuntimeError):
    """A plugin failed in a way that stops the run (a mutator, or any plugin when strict)."""

    def __init__(self, plugin: str, event: str, step: int, error: BaseException,
                 traceback_text: str = "") -> None:
        self.plugin, self.event, self.step, self.error = plugin, event, step, error
        self.traceback_text = traceback_text
        super().__init__(f"plugin '{plugin}' failed in {event} at step {step}: "
                         f"{type(error).__name__}: {error}")


class PluginConfigError(ValueError):
    """A user error in enabling or configuring plugins (unknown plugin, bad option, ...)."""


class PluginLoadError(RuntimeError):
    """An enabled plugin could not be imported or is not a valid plugin class."""


CONTROL_FLOW = (SkipStep, StopTraining, PluginAbort)

# What a plugin's code may raise that is not the plugin's failure: the run's control flow, and
# a write error (the run's storage failing, e.g. a full disk). Raised unchanged, never caught
# as a plugin's problem.
NOT_A_PLUGIN_FAILURE = (*CONTROL_FLOW, OSError)
