"""The lab's GPUAutoscaler: what `gpufleet lab --min-replicas 0` asks of the autoscaler."""

from gpufleet.autoscaler.core.spec import parse_spec
from gpufleet.lab.flags import parser
from gpufleet.lab.workload import NAME, NAMESPACE, WorkloadSpec, autoscaler_spec


def test_min_replicas_0_scales_to_zero_and_the_gateway_activates_it() -> None:
    args = parser("lab").parse_args(["--min-replicas", "0", "--idle-seconds-to-zero", "60"])
    spec = WorkloadSpec(
        nodes=2,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        idle_seconds_to_zero=args.idle_seconds_to_zero,
        policy="gpufleet",
        rate_rps=0.0,
        trace=None,
        speed=1.0,
    )
    obj = {"metadata": {"namespace": NAMESPACE, "name": NAME}, "spec": autoscaler_spec(spec)}
    parsed = parse_spec(obj)
    assert (parsed.workload.min_replicas, parsed.idle_seconds_to_zero) == (0, 60.0)
    assert parsed.signals.gateway_queue_depth == (
        'sum(lab_gateway_requests_waiting{namespace="llm"})'
    )
