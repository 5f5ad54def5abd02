"""Pure builders and conversions: scalars, tags, text, PR curves, custom scalars, hparams."""

import math
import warnings

import numpy as np
import pytest
from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

import gradlog as gl
from gradlog.tensorboard import convert, summary
from gradlog.tensorboard.hparams import (
    hparams_summaries,
    session_end_summary,
    session_start_summaries,
)


class FakeTensor:
    """Duck-typed like gradlog and PyTorch tensors."""

    def __init__(self, array):
        self.array = np.asarray(array)

    def detach(self):
        return self

    def numpy(self):
        return self.array


@pytest.mark.parametrize("value", [0.5, 3, True, np.float32(1.25), np.array(2.5),
                                   np.array([[4.0]]), FakeTensor([7.0]), gl.tensor(1.5),
                                   gl.tensor([2.0], requires_grad=True)])
def test_to_float_accepts_numbers_arrays_and_tensors(value):
    assert convert.to_float(value) == float(np.asarray(
        value.array if isinstance(value, FakeTensor) else
        value.detach().numpy() if hasattr(value, "detach") else value).reshape(()))


def test_to_float_rejects_several_values():
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        convert.to_float(np.array([1.0, 2.0]))


def test_to_numpy_takes_tensors_without_copying_arrays():
    array = np.arange(3.0)
    assert convert.to_numpy(array) is array
    assert np.array_equal(convert.to_numpy(gl.tensor([1.0, 2.0])), [1.0, 2.0])
    assert np.array_equal(convert.to_numpy([1, 2]), [1, 2])


def test_tags_are_cleaned_with_one_warning_per_tag():
    assert convert.clean_tag("train/loss-1.x_y") == "train/loss-1.x_y"
    with pytest.warns(UserWarning, match=r"'acc \(val\)%'.*'acc__val__'"):
        assert convert.clean_tag("acc (val)%") == "acc__val__"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert convert.clean_tag("acc (val)%") == "acc__val__"
    with pytest.raises(TypeError, match="str"):
        convert.clean_tag(3)


@pytest.mark.parametrize("value", [0.0, -1.5, 1e-30, 3.4e38, math.nan, math.inf, -math.inf])
def test_fast_scalar_event_is_byte_identical_to_the_builder(value):
    fast = summary.scalar_event_bytes("a/b", value, 7, 123.25)
    built = Event(wall_time=123.25, step=7, summary=summary.scalar("a/b", value))
    assert fast == built.SerializeToString()
    decoded = Event.FromString(fast).summary.value[0].simple_value
    assert decoded == np.float32(value) or (math.isnan(value) and math.isnan(decoded))


def test_fast_scalar_event_reentered_on_one_thread_builds_its_own():
    summary.scalar_event_bytes("a", 1.0, 1, 1.0)
    held = summary._reusable.__dict__.pop("event")  # as if a call were interrupted mid-way
    data = summary.scalar_event_bytes("x", 2.0, 2, 2.0)
    assert Event.FromString(data).summary.value[0].tag == "x"
    assert held[1].tag == "a"  # the interrupted call's message was not touched


def test_new_style_scalar_is_a_rank0_float32_tensor():
    value = summary.scalar("s", 0.25, new_style=True).value[0]
    assert value.tensor.dtype == types_pb2.DT_FLOAT and not value.tensor.tensor_shape.dim
    assert np.frombuffer(value.tensor.tensor_content, "<f4")[0] == 0.25
    assert value.metadata.plugin_data.plugin_name == "scalars" and value.metadata.data_class == 1


def test_text_is_a_string_tensor_of_the_text_plugin_under_text_summary():
    value = summary.text("notes", "**é**").value[0]
    assert value.tag == "notes/text_summary"
    assert value.metadata.plugin_data.plugin_name == "text"
    assert list(value.tensor.string_val) == ["**é**".encode()]
    assert [d.size for d in value.tensor.tensor_shape.dim] == [1]


def test_pr_curve_counts_and_ratios():
    labels = np.array([1, 0, 1, 1, 0])
    predictions = np.array([0.9, 0.8, 0.4, 0.1, 0.05])
    value = summary.pr_curve("pr", labels, predictions, num_thresholds=3).value[0]
    data = np.frombuffer(value.tensor.tensor_content, "<f4").reshape(6, 3)
    tp, fp, tn, fn, precision, recall = data
    # thresholds 0, 0.5, 1: predictions >= 0.5 are {0.9 (pos), 0.8 (neg)}
    assert list(tp) == [3, 1, 0] and list(fp) == [2, 1, 0]
    assert list(tn) == [0, 1, 2] and list(fn) == [0, 2, 3]
    assert precision[1] == pytest.approx(0.5) and recall[1] == pytest.approx(1 / 3)
    torch_summary = pytest.importorskip("torch.utils.tensorboard.summary")
    expected = torch_summary.compute_curve(labels, predictions, num_thresholds=3)
    assert np.allclose(data, expected)


def test_pr_curve_matches_pytorch_with_weights_and_caps_thresholds():
    torch_summary = pytest.importorskip("torch.utils.tensorboard.summary")
    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 2, 500), rng.random(500)
    weights = rng.random(500)
    value = summary.pr_curve("pr", labels, predictions, num_thresholds=500,
                             weights=weights).value[0]
    data = np.frombuffer(value.tensor.tensor_content, "<f4").reshape(6, -1)
    assert data.shape == (6, 127)
    expected = torch_summary.compute_curve(labels, predictions, 127, weights)
    assert np.allclose(data, expected, rtol=1e-5)


def test_custom_scalars_layout():
    from tensorboard.plugins.custom_scalar import layout_pb2

    value = summary.custom_scalars({"Loss": {"both": ["Multiline", ["loss/.*"]],
                                             "band": ["Margin", ["m", "lo", "hi"]]}}).value[0]
    assert value.tag == "custom_scalars__config__"
    layout = layout_pb2.Layout.FromString(value.tensor.string_val[0])
    (category,) = layout.category
    assert category.title == "Loss" and [c.title for c in category.chart] == ["both", "band"]
    assert list(category.chart[0].multiline.tag) == ["loss/.*"]
    assert category.chart[1].margin.series[0].upper == "hi"
    with pytest.raises(ValueError, match="3 tags"):
        summary.custom_scalars({"x": {"c": ["Margin", ["a"]]}})


def parse(summary_proto):
    value = summary_proto.value[0]
    assert value.metadata.plugin_data.plugin_name == "hparams"
    return value.tag, plugin_data_pb2.HParamsPluginData.FromString(
        value.metadata.plugin_data.content)


def test_hparams_types_and_domains():
    with pytest.warns(UserWarning, match="metric tag"):
        exp, start, end = hparams_summaries(
            {"lr": 0.1, "layers": 3, "bn": True, "opt": "adam", "skip": None,
             "t": gl.tensor(0.5)},
            {"hparam/acc": 0.9, "metric tag": 1.0}, {"opt": ["adam", "sgd"]}, wall_time=100.0)
    tag, data = parse(exp)
    assert tag == metadata.EXPERIMENT_TAG and data.version == metadata.PLUGIN_DATA_VERSION
    infos = {info.name: info for info in data.experiment.hparam_infos}
    assert {n: api_pb2.DataType.Name(i.type) for n, i in infos.items()} == {
        "lr": "DATA_TYPE_FLOAT64", "layers": "DATA_TYPE_FLOAT64", "bn": "DATA_TYPE_BOOL",
        "opt": "DATA_TYPE_STRING", "t": "DATA_TYPE_FLOAT64"}
    assert [v.bool_value for v in infos["bn"].domain_discrete.values] == [False, True]
    assert [v.string_value for v in infos["opt"].domain_discrete.values] == ["adam", "sgd"]
    assert not infos["lr"].HasField("domain_discrete") and not infos["lr"].HasField(
        "domain_interval")
    assert [m.name.tag for m in data.experiment.metric_infos] == ["hparam/acc", "metric_tag"]
    tag, data = parse(start)
    hparams = data.session_start_info.hparams
    assert tag == metadata.SESSION_START_INFO_TAG and hparams["bn"].bool_value is True
    assert hparams["lr"].number_value == 0.1 and hparams["opt"].string_value == "adam"
    assert hparams["t"].number_value == 0.5 and "skip" not in hparams
    tag, data = parse(end)
    assert tag == metadata.SESSION_END_INFO_TAG
    assert data.session_end_info.status == api_pb2.STATUS_SUCCESS


def test_hparams_reject_bad_input():
    with pytest.raises(TypeError, match="dictionaries"):
        hparams_summaries([("lr", 1)], {})
    with pytest.raises(ValueError, match="bool, str, int, float"):
        hparams_summaries({"f": object()}, {})
    with pytest.raises(TypeError, match="same type"):
        hparams_summaries({"opt": "adam"}, {}, {"opt": [1, 2]})
    with pytest.raises(TypeError, match="not in hparam_dict"):
        hparams_summaries({"opt": "adam"}, {}, {"lr": [0.1]})


def test_a_session_starts_and_ends_apart_with_the_end_status_given():
    exp, start = session_start_summaries({"lr": 0.1}, ["val/acc", "train/loss"],
                                         wall_time=100.0)
    assert [m.name.tag for m in parse(exp)[1].experiment.metric_infos] == [
        "val/acc", "train/loss"]
    assert parse(start)[1].session_start_info.start_time_secs == 100.0
    tag, data = parse(session_end_summary("failure", wall_time=160.0))
    assert tag == metadata.SESSION_END_INFO_TAG
    assert data.session_end_info.status == api_pb2.STATUS_FAILURE
    assert data.session_end_info.end_time_secs == 160.0
    with pytest.raises(ValueError, match="status should be one of .*got 'done'"):
        session_end_summary("done")


def test_to_float_of_a_torch_tensor_is_its_one_value():
    torch = pytest.importorskip("torch")
    x = torch.tensor([0.1], requires_grad=True)
    for value in (x * 3, (x * 3).detach().double(), (x * 3).to(torch.bfloat16),
                  torch.tensor(7), torch.tensor(True), torch.tensor([[2.5]], dtype=torch.float16)):
        assert convert.to_float(value) == float(value.detach().double().numpy().reshape(()))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        convert.to_float(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="complex"):
        convert.to_float(torch.tensor(1 + 2j))
