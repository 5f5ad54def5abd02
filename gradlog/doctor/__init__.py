"""The training doctor: one rule set that names what is wrong with a run (which kind, which
layers, since which step, on what evidence, and what to try), over the statistics gradlog's
plugins log. ``gradlog doctor LOGDIR`` runs it offline on event files; the ``doctor`` plugin
runs it live."""

from .findings import KINDS, Finding, format_table, report_json, report_text, to_json
from .logdir import DoctorError, read_trace, run_directories
from .rules import RULES, diagnose, parse_override, rules_with
from .trace import STATISTICS, Series, Trace

__all__ = ["KINDS", "Finding", "format_table", "report_json", "report_text", "to_json",
           "parse_override", "DoctorError", "read_trace",
           "run_directories", "RULES", "diagnose", "rules_with", "STATISTICS", "Series",
           "Trace", "diagnose_logdir"]


def diagnose_logdir(logdir: str, overrides: dict | None = None) -> dict[str, list[Finding]]:
    """``{run directory: findings}`` for every run under ``logdir``."""
    rules = rules_with(overrides)
    return {run: diagnose(read_trace(run), rules) for run in run_directories(logdir)}
