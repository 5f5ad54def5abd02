"""The three hparams-plugin summaries PyTorch's ``add_hparams`` writes into a trial's run:
the experiment (hparam names, types, domains; metric names), the session start (the values)
and the session end (status).

Types and domains, fixed where PyTorch gets them wrong or risky:

* ``bool`` is ``DATA_TYPE_BOOL`` with the domain ``[False, True]`` (PyTorch stores bools as the
  numbers 0/1, because ``bool`` is an ``int``).
* ``str`` is ``DATA_TYPE_STRING``; numbers (and one-element tensors) are ``DATA_TYPE_FLOAT64``.
* ``hparam_domain_discrete[name]`` gives a discrete domain, checked against the value's type.
  Without it, strings and numbers get no domain: every trial writes its own experiment and
  TensorBoard shows the first one it finds, so a domain built from one trial's value would hide
  the other trials from the dashboard's filters.
"""

from __future__ import annotations

import numbers
import time

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

from .convert import clean_tag, to_numpy

__all__ = ["hparams_summaries", "session_start_summaries", "session_end_summary"]


def _kind(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, numbers.Real):
        return "number"
    array = to_numpy(value)
    if array.size == 1 and array.dtype.kind in "biuf":
        return "bool" if array.dtype.kind == "b" else "number"
    raise ValueError(f"hparam values must be bool, str, int, float or a one-element tensor, "
                     f"got {type(value).__name__}")


def _proto_value(kind: str, value):
    from google.protobuf import struct_pb2

    if kind == "bool":
        return struct_pb2.Value(bool_value=bool(to_numpy(value).reshape(())))
    if kind == "str":
        return struct_pb2.Value(string_value=value)
    return struct_pb2.Value(number_value=float(to_numpy(value).reshape(())))


def _summary(tag: str, **plugin_data) -> Summary:
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    content = plugin_data_pb2.HParamsPluginData(**plugin_data)
    return Summary(value=[Summary.Value(tag=tag,
                                        metadata=metadata.create_summary_metadata(content))])


def hparams_summaries(hparam_dict: dict, metric_dict: dict, hparam_domain_discrete=None,
                      wall_time: float | None = None) -> tuple[Summary, Summary, Summary]:
    """(experiment, session start, session end) summaries for one finished trial.

    Args:
        hparam_dict: ``{name: bool | str | number | one-element tensor | None}``; ``None``
            values are skipped, as in PyTorch.
        metric_dict: ``{metric tag: value}``; the tags name scalars of the trial's run.
        hparam_domain_discrete: ``{name: [every value the hparam can take]}``.
        wall_time: start and end time of the session (default: now).
    """
    if not isinstance(hparam_dict, dict) or not isinstance(metric_dict, dict):
        raise TypeError("hparam_dict and metric_dict should be dictionaries")
    wall_time = time.time() if wall_time is None else float(wall_time)
    experiment, start = session_start_summaries(hparam_dict, list(metric_dict),
                                                hparam_domain_discrete, wall_time)
    return experiment, start, session_end_summary("success", wall_time)


def session_start_summaries(hparam_dict: dict, metric_tags, hparam_domain_discrete=None,
                            wall_time: float | None = None) -> tuple[Summary, Summary]:
    """(experiment, session start) summaries of a trial that starts now: written into the
    trial's run when it starts, a running or crashed run is in the HParams table too.

    Args:
        hparam_dict: as in :func:`hparams_summaries`.
        metric_tags: the tags of the run's scalars the table shows (their last values).
        hparam_domain_discrete: as in :func:`hparams_summaries`.
        wall_time: the session's start time (default: now).
    """
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    if not isinstance(hparam_dict, dict):
        raise TypeError("hparam_dict should be a dictionary")
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("hparam_domain_discrete should be a dictionary")
    types = {"bool": api_pb2.DATA_TYPE_BOOL, "str": api_pb2.DATA_TYPE_STRING,
             "number": api_pb2.DATA_TYPE_FLOAT64}
    wall_time = time.time() if wall_time is None else float(wall_time)
    infos, start = [], plugin_data_pb2.SessionStartInfo(start_time_secs=wall_time)
    for name, value in hparam_dict.items():
        if value is None:
            continue
        kind = _kind(value)
        start.hparams[name].CopyFrom(_proto_value(kind, value))
        info = api_pb2.HParamInfo(name=name, type=types[kind])
        if name in domains:
            domain = domains[name]
            if not isinstance(domain, (list, tuple)) or any(_kind(d) != kind for d in domain):
                raise TypeError(f"hparam_domain_discrete[{name!r}] should be a list of values "
                                f"of the same type as hparam_dict[{name!r}]")
            info.domain_discrete.CopyFrom(struct_pb2.ListValue(
                values=[_proto_value(kind, d) for d in domain]))
        elif kind == "bool":
            info.domain_discrete.CopyFrom(struct_pb2.ListValue(
                values=[struct_pb2.Value(bool_value=False), struct_pb2.Value(bool_value=True)]))
        infos.append(info)
    unknown = set(domains) - set(hparam_dict)
    if unknown:
        raise TypeError(f"hparam_domain_discrete names hparams not in hparam_dict: "
                        f"{sorted(unknown)}")
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=clean_tag(tag)))
               for tag in metric_tags]
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics,
                                    time_created_secs=wall_time)
    return (_summary(metadata.EXPERIMENT_TAG, experiment=experiment),
            _summary(metadata.SESSION_START_INFO_TAG, session_start_info=start))


def session_end_summary(status: str = "success", wall_time: float | None = None) -> Summary:
    """The session end of a trial: ``status`` is ``"success"``, ``"failure"``, ``"running"``
    or ``"unknown"``; ``wall_time`` its end time (default: now)."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    statuses = {"success": api_pb2.STATUS_SUCCESS, "failure": api_pb2.STATUS_FAILURE,
                "running": api_pb2.STATUS_RUNNING, "unknown": api_pb2.STATUS_UNKNOWN}
    if status not in statuses:
        raise ValueError(f"status should be one of {sorted(statuses)}, got {status!r}")
    end = plugin_data_pb2.SessionEndInfo(
        status=statuses[status], end_time_secs=time.time() if wall_time is None else wall_time)
    return _summary(metadata.SESSION_END_INFO_TAG, session_end_info=end)
