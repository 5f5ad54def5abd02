"""A run still being written: after TensorBoard reloads, the heat map has the new steps."""

from __future__ import annotations

import pytest
from dashboard_helpers import LOADERS, TensorBoard

from gradlog.tensorboard import SummaryWriter

pytestmark = [pytest.mark.server, pytest.mark.slow]


def heat_map_steps(server: TensorBoard) -> list[int]:
    body = server.get("/data/plugin/gradient_flow/heatmap", run="live", metric="grad_norm")
    return body["steps"] if len(body["rows"]) == 2 else []


@pytest.mark.parametrize("load_fast", LOADERS)
def test_new_steps_of_a_run_being_written_appear_after_a_reload(tmp_path, load_fast):
    writer = SummaryWriter(str(tmp_path / "live"))
    server = None
    try:
        def write(steps):
            for step in steps:
                for layer, scale in (("conv", 1.0), ("fc", 2.0)):
                    writer.add_scalar(f"grad-norm/{layer}", scale * (step + 1), step)
            writer.flush()

        write(range(3))
        server = TensorBoard(tmp_path, load_fast, reload_interval=1)
        server.wait_for(lambda: heat_map_steps(server) == [0, 1, 2])
        write(range(3, 6))
        server.wait_for(lambda: heat_map_steps(server) == list(range(6)))
        body = server.get("/data/plugin/gradient_flow/heatmap", run="live", metric="grad_norm")
        assert body["values"] == [[float(s + 1) for s in range(6)],
                                  [2.0 * (s + 1) for s in range(6)]]
    finally:
        if server is not None:
            server.stop()
        writer.close()
