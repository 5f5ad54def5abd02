"""Small utilities below the engine, shared by it, modules and optimizers (``hooks``:
``RemovableHandle`` and the hook registries); ``gradlog.utils.checkpoint``, PyTorch's name
for activation checkpointing, is imported on first use (it re-exports autograd's)."""


def __getattr__(name: str):
    if name == "checkpoint":
        import importlib
        return importlib.import_module(".checkpoint", __name__)
    raise AttributeError(f"module 'gradlog.utils' has no attribute {name!r}")
