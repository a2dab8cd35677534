"""A KEDA external trigger's metadata: defaults, and one clear error per bad key."""

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.autoscaler.core.scaler_metadata import (
    MetadataError,
    ScalerTrigger,
    parse_metadata,
)


def test_defaults_follow_the_policys_desired_replicas() -> None:
    assert parse_metadata({"autoscaler": "chat", "scalerAddress": "x:9403"}) == ScalerTrigger(
        autoscaler="chat", metric="gpufleet_desired_replicas", target=1.0, activation=0.0
    )


def test_a_signal_by_its_short_name_with_its_targets() -> None:
    meta = {
        "autoscaler": "chat",
        "metric": "queue_depth",
        "targetValue": "10",
        "activationValue": "0.5",
    }
    assert parse_metadata(meta) == ScalerTrigger(
        autoscaler="chat", metric="gpufleet_queue_depth", target=10.0, activation=0.5
    )


def test_a_key_from_env_as_keda_passes_it_on() -> None:
    """KEDA resolves `targetValueFromEnv` and passes the value under that key: it went
    unread, and the default target (or none: an error) applied."""
    meta = {
        "autoscalerFromEnv": "chat",
        "metric": "queue_depth",
        "targetValueFromEnv": "10",
        "activationValueFromEnv": "0.5",
    }
    assert parse_metadata(meta) == ScalerTrigger(
        autoscaler="chat", metric="gpufleet_queue_depth", target=10.0, activation=0.5
    )
    both = {"autoscaler": "chat", "targetValue": "2", "targetValueFromEnv": "9"}
    assert parse_metadata(both).target == 2.0  # the key itself wins


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({}, "scalerMetadata.autoscaler: required"),
        ({"autoscaler": "a", "metric": "cpu"}, "scalerMetadata.metric: 'cpu' is not one of"),
        ({"autoscaler": "a", "metric": "queue_depth"}, "targetValue: required for gpufleet_q"),
        ({"autoscaler": "a", "targetValue": "ten"}, "targetValue: 'ten' is not a number"),
        ({"autoscaler": "a", "targetValue": "0"}, "targetValue: 0 must be at least 0.001"),
        # KEDA's HPA would read averageValue 0.000, which the API server refuses
        ({"autoscaler": "a", "targetValue": "0.0004"}, "targetValue: 0.0004 must be at least"),
        ({"autoscaler": "a", "activationValue": "nan"}, "activationValue: 'nan' is not a finite"),
    ],
)
def test_bad_metadata_names_the_key(meta: dict, says: str) -> None:
    with pytest.raises(MetadataError, match=says):
        parse_metadata(meta)


@given(
    st.dictionaries(
        st.sampled_from(["autoscaler", "metric", "targetValue", "activationValue"]),
        st.text(max_size=12),
    )
)
def test_any_metadata_parses_or_is_one_metadata_error(meta: dict) -> None:
    with contextlib.suppress(MetadataError):
        parse_metadata(meta)
