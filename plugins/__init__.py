"""gradlog's built-in plugins, each one file, using only gradlog's public API (as a third
party would). They are declared in the ``gradlog.plugins`` entry-point group in
pyproject.toml."""
