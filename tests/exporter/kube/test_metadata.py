"""API objects into the watcher's plain records: one malformed object costs only itself."""

import re

import pytest

from gpufleet.exporter.core.podmeta import PodMeta
from gpufleet.exporter.kube.metadata import pod_meta, slice_entry
from gpufleet.kube.errors import KubeError, KubeErrorKind
from gpufleet.kube.listing import json_object

ALL = ()


@pytest.mark.parametrize(
    ("pod", "labels", "allowlist", "expected"),
    [
        pytest.param(
            {"metadata": {"namespace": "ml", "name": "a", "uid": "u1", "labels": {"app": "x"}}},
            True,
            ALL,
            (("ml", "a"), PodMeta(uid="u1", labels=(("app", "x"),))),
            id="labels",
        ),
        pytest.param(
            {"metadata": {"namespace": "ml", "name": "a", "uid": "u1", "labels": {"app": "x"}}},
            False,
            ALL,
            (("ml", "a"), PodMeta(uid="u1")),
            id="labels-off-uid-kept",
        ),
        pytest.param(
            {"metadata": {"namespace": "ml", "name": "a", "labels": {"app": "x", "t": "y"}}},
            True,
            (re.compile("^t$"),),
            (("ml", "a"), PodMeta(labels=(("t", "y"),))),
            id="allowlist",
        ),
        pytest.param(
            {"metadata": {"namespace": "ml", "name": "a", "uid": 7, "labels": {"a": 1, "b": "2"}}},
            True,
            ALL,
            (("ml", "a"), PodMeta(labels=(("b", "2"),))),
            id="wrong-types-dropped",
        ),
        pytest.param({"metadata": {"namespace": "ml"}}, True, ALL, None, id="no-name"),
        pytest.param({"metadata": "x"}, True, ALL, None, id="bad-metadata"),
        pytest.param({}, True, ALL, None, id="empty"),
    ],
)
def test_pod_meta(pod, labels, allowlist, expected) -> None:
    assert pod_meta(pod, labels=labels, allowlist=allowlist) == expected


def test_slice_entry_keeps_the_slice_name_even_without_gpus() -> None:
    # a slice that lost its devices must replace the old entry, not linger
    assert slice_entry({"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com"}}) == (
        "s",
        (),
    )
    assert slice_entry({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"<html>", "answer is not JSON: "),
        (b"[" * 100_000, "answer is not JSON: nested too deep"),  # RecursionError, not ValueError
        (b"[]", "answer is not a JSON object"),
    ],
)
def test_an_answer_that_is_no_json_object_is_an_invalid_answer(answer: bytes, says: str) -> None:
    with pytest.raises(KubeError) as caught:
        json_object(answer)
    assert caught.value.kind is KubeErrorKind.INVALID and str(caught.value).startswith(says)
