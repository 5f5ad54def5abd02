"""Small utilities shared by the engine, modules and optimizers; ``gradlog.utils.checkpoint``
(activation checkpointing) is imported on first use, as it depends on the engine."""


def __getattr__(name: str):
    if name == "checkpoint":
        import importlib
        return importlib.import_module(".checkpoint", __name__)
    raise AttributeError(f"module 'gradlog.utils' has no attribute {name!r}")
