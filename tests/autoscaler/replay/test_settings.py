"""`gpufleet simulate` settings: flags, env vars, repeated --trace and the reproduce line."""

import pytest

from gpufleet.autoscaler.core.factory import make_policy
from gpufleet.autoscaler.replay.settings import SimulateSettings, command_line, merge_repeated
from gpufleet.settings import SettingsError, build_parser, load_settings


def load(argv, monkeypatch, env=None) -> SimulateSettings:
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    parser = build_parser(SimulateSettings, prog="gpufleet simulate", description="")
    return load_settings(SimulateSettings, parser, merge_repeated(argv, "--trace"))


@pytest.mark.parametrize(
    ("argv", "env", "attr", "expected"),
    [
        ([], {}, "policy_names", ("hpa", "keda", "gpufleet", "oracle")),
        (["--policy", " keda , oracle "], {}, "policy_names", ("keda", "oracle")),
        ([], {"GPUFLEET_SIM_POLICY": "hpa"}, "policy_names", ("hpa",)),
        (["--trace", "a.csv,b.csv"], {}, "trace_paths", ("a.csv", "b.csv")),
        (["--trace", "a.csv", "--trace=b.csv"], {}, "trace_paths", ("a.csv", "b.csv")),
        ([], {"GPUFLEET_SIM_TRACE": "c.csv"}, "trace_paths", ("c.csv",)),
        (["--no-progress"], {}, "progress", False),
        ([], {"GPUFLEET_SIM_PROGRESS": "false"}, "progress", False),
        (["--sweep"], {}, "sweep", True),
        (["--scale", "3"], {"GPUFLEET_SIM_SCALE": "2"}, "scale", 3),
        ([], {}, "keda_min_replica_count", None),
        (["--keda-min-replica-count", "0"], {}, "keda_min_replica_count", 0),
        (["--keda-metric-type", "Value"], {}, "keda_metric_type", "Value"),
        ([], {}, "routing", "least-in-flight"),
        ([], {"GPUFLEET_SIM_ROUTING": "least-tokens"}, "routing", "least-tokens"),
    ],
    ids=[
        "all four policies by default",
        "policy list trimmed",
        "policy env var",
        "comma list of traces",
        "repeated --trace",
        "trace env var",
        "no progress",
        "progress env var",
        "sweep",
        "flag beats env",
        "keda takes the workload's floor by default",
        "keda scale to zero",
        "keda Value metric type",
        "least-in-flight routing by default",
        "routing env var",
    ],
)
def test_settings(argv, env, attr, expected, monkeypatch):
    assert getattr(load(argv, monkeypatch, env), attr) == expected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--policy", "hpa,vpa"], {}, "invalid flag --policy: unknown policy 'vpa'"),
        (["--policy", ","], {}, "invalid flag --policy: no policy given"),
        (["--scale", "0"], {}, "invalid flag --scale: Input should be greater than or equal to 1"),
        (["--hpa-target-util", "120"], {}, "invalid flag --hpa-target-util"),
        (["--keda-metric-type", "Utilization"], {}, "invalid flag --keda-metric-type"),
        (["--routing", "random"], {}, "invalid flag --routing"),
        ([], {"GPUFLEET_SIM_BATCH_SLOTS": "many"}, "invalid env var GPUFLEET_SIM_BATCH_SLOTS"),
    ],
    ids=[
        "unknown policy",
        "empty policy list",
        "scale below 1",
        "util over 100",
        "keda metric type",
        "unknown routing",
        "bad env var",
    ],
)
def test_bad_values_name_the_flag(argv, env, message, monkeypatch):
    with pytest.raises(SettingsError, match="^" + message.replace("(", r"\(")):
        load(argv, monkeypatch, env)


def test_settings_build_the_simulator_config(monkeypatch):
    s = load(
        ["--cold-start-seconds", "30", "--gpus-per-node", "4", "--min-replicas", "3"],
        monkeypatch,
        {"GPUFLEET_SIM_BATCH_SLOTS": "32", "GPUFLEET_SIM_SEED": "7"},
    )
    config, workload = s.sim_config(), s.workload()
    assert config.cluster.cold_start_seconds == workload.cold_start_seconds == 30
    # The policy sizes idle paid GPUs and fills nodes by the node size the cluster has.
    assert config.cluster.gpus_per_node == workload.gpus_per_node == 4
    assert config.service.batch_slots == 32
    assert config.service.routing == "least-in-flight"
    assert s.seed == 7  # the --scale copies' jitter; load_trace takes it
    assert config.initial_replicas == workload.min_replicas == 3
    assert workload.max_replicas == 200


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--trace", "a.csv"], {}, "gpufleet simulate --trace a.csv"),
        (
            ["--trace", "a b.csv", "--policy", "hpa", "--report", "out", "--no-progress"],
            {},
            "gpufleet simulate --trace 'a b.csv' --policy hpa",
        ),
        (
            ["--trace", "a.csv", "--sweep"],
            {"GPUFLEET_SIM_KEDA_QUEUE_TARGET": "5", "GPUFLEET_SIM_JOBS": "2"},
            "gpufleet simulate --trace a.csv --sweep --keda-queue-target 5.0",
        ),
    ],
    ids=["defaults left out", "output-only flags left out", "env values become flags"],
)
def test_command_line_reproduces_the_numbers(argv, env, expected, monkeypatch):
    assert command_line(load(argv, monkeypatch, env)) == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], []),
        (["--trace", "a"], ["--trace", "a"]),
        (
            ["--seed", "1", "--trace", "a", "-x", "--trace=b"],
            ["--seed", "1", "--trace", "a,b", "-x"],
        ),
        (["--trace"], ["--trace"]),
        (["--trace", "--seed", "1"], ["--trace", "--seed", "1"]),
        (["--trace", "a", "--", "--trace", "b"], ["--trace", "a", "--", "--trace", "b"]),
    ],
    ids=[
        "empty",
        "single",
        "joined where the first was",
        "missing value left to argparse",
        "a flag is not a value",
        "--",
    ],
)
def test_merge_repeated(argv, expected):
    assert merge_repeated(argv, "--trace") == expected


def test_no_gpufleet_placeholders_runs_gpufleet_without_node_headroom(monkeypatch) -> None:
    """Issue 18 §5: the simulator runs with and without node headroom, as the live
    controller does with nodePool.placeholders true or false."""
    on, off = load([], monkeypatch), load(["--no-gpufleet-placeholders"], monkeypatch)
    assert command_line(off) == "gpufleet simulate --no-gpufleet-placeholders"
    assert make_policy("gpufleet", on.workload(), on.tuning()).settings.placeholders is True
    assert make_policy("gpufleet", off.workload(), off.tuning()).settings.placeholders is False
