"""Discovery is not activation: listing plugins imports none of them; enabling one imports
only that one."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
from gradlog.plugin import discover, resolve_plugins
names = [info.name for info in discover()]
before = sorted(m for m in sys.modules if m.startswith("gradlog_plugins."))
resolve_plugins(["grad-norm"])
after = sorted(m for m in sys.modules if m.startswith("gradlog_plugins."))
print(json.dumps({"names": names, "before": before, "after": after}))
"""


def test_discover_imports_nothing_and_enabling_imports_only_the_plugin():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout)
    assert {"histogram", "grad-norm", "gradcam", "nan-guard", "grad-clip", "adversarial",
            "grad-noise", "lr-monitor", "activation-stats"} <= set(result["names"])
    assert result["before"] == []
    assert result["after"] == ["gradlog_plugins.grad_norm"]
