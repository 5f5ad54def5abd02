"""add_graph: the GraphDef of one forward pass of a gradlog module (scopes from named_modules,
ops from the autograd graph, shapes on the edges), and PyTorch modules through PyTorch."""

import numpy as np
import pytest
from tb_helpers import run_python
from tensorboard.backend.event_processing import event_accumulator

import gradlog as gl
from gradlog import nn
from gradlog.examples.shapes import cnn
from gradlog.tensorboard import SummaryWriter
from gradlog.tensorboard.graph import autograd_graph_def, graph


def shapes(node):
    return [[d.size for d in s.dim] for s in node.attr["_output_shapes"].list.shape]


def by_name(graph_def):
    return {node.name: node for node in graph_def.node}


def test_the_example_model_shows_its_layers_by_name_with_shapes():
    model = cnn(4)
    model[5].eval()  # a mixed mode, restored afterwards
    x = gl.randn(2, 1, 32, 32)
    graph_def, metadata = graph(model, x)
    nodes = by_name(graph_def)
    assert metadata.step_stats.dev_stats[0].device == "/device:CPU:0"
    assert graph_def.versions.producer == 22
    for name, module in model.named_modules():
        if name:
            scope = f"Sequential/{type(module).__name__}[{name}]/"
            assert any(n.startswith(scope) for n in nodes), scope
    assert nodes["Sequential/Conv2d[conv1]/Convolution"].op == "ConvolutionBackward0"
    assert nodes["Sequential/Conv2d[conv1]/Convolution"].input == [
        "input/input.1", "Sequential/Conv2d[conv1]/weight", "Sequential/Conv2d[conv1]/bias"]
    assert nodes["Sequential/Linear[fc]/weight"].op == "Parameter"
    assert shapes(nodes["Sequential/Linear[fc]/weight"]) == [[4, 32]]
    assert nodes["output/output.1"].input == ["Sequential/Linear[fc]/Addmm"]
    expected = x
    for name, module in model.named_children():  # each layer's output shape on its edge
        expected = module(expected)
        (last,) = [n for n in nodes.values()
                   if n.name.startswith(f"Sequential/{type(module).__name__}[{name}]/")
                   and n.op != "Parameter"][-1:]
        assert shapes(last) == [list(expected.shape)], last.name
    for node in graph_def.node:  # every edge leads to a node of the graph
        assert all(source.split(":")[0] in nodes for source in node.input), node.name
    assert model.training and not model[5].training and model[4].training


def test_the_pass_leaves_the_model_as_it_was():
    model = cnn(4)
    running = model[1].running_mean.numpy().copy()
    graph(model, gl.randn(3, 1, 16, 16))
    assert all(p.grad is None for p in model.parameters())
    assert np.array_equal(model[1].running_mean.numpy(), running)  # eval mode: no update
    assert all(not m._forward_hooks for m in model.modules())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.act = nn.ReLU()

    def forward(self, x, scale=2.0):
        y = self.act(self.body(x)) + self.act(x) * scale  # act is called twice
        return y, x.view(6, 2)


def test_nested_modules_functional_ops_and_two_outputs():
    model = Block()
    for p in model.parameters():
        p.requires_grad_(False)  # the input alone still records every op
    graph_def, _ = graph(model, (gl.randn(3, 4),))
    nodes = by_name(graph_def)
    assert {"Block/Sequential[body]/Linear[0]/Addmm", "Block/Sequential[body]/Tanh[1]/Tanh",
            "Block/ReLU[act]/Relu", "Block/ReLU[act]/Relu.1", "Block/Add",
            "Block/Mul"} <= set(nodes)
    second = nodes["output/output.2"]
    assert second.input == ["Block/View"] and shapes(second) == [[6, 2]]
    assert shapes(nodes["Block/Add"]) == [[3, 4]]


def test_errors_name_the_problem():
    with pytest.raises(TypeError, match="needs a module.*function"):
        autograd_graph_def(lambda x: x, gl.randn(2))
    with pytest.raises(TypeError, match="cannot watch a builtins.function"):
        graph(lambda x: x, gl.randn(2))  # no engine claims it
    with gl.no_grad(), pytest.raises(RuntimeError, match="grad mode"):
        graph(nn.Linear(2, 2), gl.randn(1, 2))


def test_writer_logs_the_graph_and_its_run_metadata(log_dir):
    with SummaryWriter(log_dir) as writer:
        writer.add_graph(cnn(4), gl.randn(1, 1, 16, 16), verbose=False)
    accumulator = event_accumulator.EventAccumulator(log_dir)
    accumulator.Reload()
    assert accumulator.Tags()["graph"] and accumulator.Tags()["run_metadata"] == ["step1"]
    assert "Sequential/Conv2d[conv3]/Convolution" in by_name(accumulator.Graph())


def test_a_gradlog_graph_does_not_import_torch(tmp_path):
    result = run_python("""
        import sys
        import gradlog as gl
        from gradlog import nn
        from gradlog.tensorboard import SummaryWriter
        with SummaryWriter(sys.argv[1]) as writer:
            writer.add_graph(nn.Linear(3, 2), gl.randn(1, 3), verbose=True)
        print("torch" in sys.modules)
    """, str(tmp_path / "run"))
    lines = result.stdout.splitlines()
    assert lines[-1] == "False" and any("Linear/Addmm = AddmmBackward0" in l for l in lines)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
def test_a_torch_module_is_traced_by_pytorch_as_in_its_writer(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8, 3))
    x = torch.randn(1, 1, 4, 4)
    graphs = []
    for name, writer_class in (("ours", SummaryWriter), ("torch", TorchWriter)):
        with writer_class(str(tmp_path / name)) as writer:
            writer.add_graph(model, x)
        accumulator = event_accumulator.EventAccumulator(str(tmp_path / name))
        accumulator.Reload()
        graphs.append(accumulator.Graph())
    assert graphs[0] == graphs[1]
    ops = {node.op for node in graphs[0].node}
    assert {"aten::_convolution", "aten::relu", "aten::linear"} <= ops or {
        "aten::conv2d", "aten::relu", "aten::linear"} <= ops, ops


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
@pytest.mark.parametrize("engine", ["gradlog", "torch"])
def test_add_graph_traces_with_the_models_engine(engine):
    """The writer does not know the engines: the tracer they install asks the model's
    engine, whose graph_def is what add_graph writes (PyTorch's tracer for a torch module)."""
    if engine == "torch":
        torch = pytest.importorskip("torch")
        model, x = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()), torch.randn(1, 3)
    else:
        model, x = nn.Sequential(nn.Linear(3, 2), nn.ReLU()), gl.randn(1, 3)
    from gradlog.engines import engine_for

    direct = engine_for(model).graph_def(model, x)
    assert graph(model, x)[0] == direct
    ops = {node.op for node in direct.node}
    assert ("aten::linear" in ops) if engine == "torch" else ("AddmmBackward0" in ops), ops
