"""Built-in examples for ``gradlog train``: each module defines ``build(config) -> dict``."""

BUILTIN = {
    "shapes": "gradlog.examples.shapes",
    "example": "gradlog.examples.shapes",
    "shapes-mlp": "gradlog.examples.shapes_mlp",
}
