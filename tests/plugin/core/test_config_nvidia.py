"""Issue 16: configs NVIDIA k8s-device-plugin v0.20 accepts load here, those it rejects fail
here, and no config crashes the loader. NVIDIA's verdicts (sigs.k8s.io/yaml into
`api/config/v1`: JSON semantics, keys matched ignoring case but exactly inside the sharing
sections, read through maps in `replicas.go`, unknown keys ignored) are facts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.plugin.core.config import (
    ConfigError,
    Flags,
    PluginConfig,
    PluginFlags,
    ReplicatedResource,
    Sharing,
    SharingKind,
)
from gpufleet.plugin.core.config_parse import parse_config

TS = "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
GPU_X2 = Sharing(
    kind=SharingKind.TIME_SLICING,
    resources=(ReplicatedResource(name="nvidia.com/gpu", replicas=2),),
)


@pytest.mark.parametrize(
    ("text", "expected", "warning"),
    [
        (
            "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n",
            PluginConfig(
                flags=Flags(plugin=PluginFlags(shared_devices_allocation_policy="packed"))
            ),
            None,
        ),
        (
            "flags:\n  plugin:\n    fooBar: 1\n",
            PluginConfig(),
            "config.yaml: flags.plugin.fooBar: unknown key, ignored as NVIDIA's plugin does",
        ),
        (
            "flag:\n  migStrategy: none\n",
            PluginConfig(),
            "config.yaml: flag: unknown key, ignored as NVIDIA's plugin does (did you mean "
            "'flags'?)",
        ),
        (
            "extra: 1\n",
            PluginConfig(),
            "config.yaml: extra: unknown key, ignored as NVIDIA's plugin does (expected one of: "
            "version, flags, resources, sharing, imex)",
        ),
        (
            TS.replace("replicas: 2", "replicas: 2\n      replica: 9"),
            PluginConfig(sharing=GPU_X2),
            "config.yaml: sharing.timeSlicing.resources[0].replica: unknown key, ignored as "
            "NVIDIA's plugin does (did you mean 'replicas'?)",
        ),
        (
            "resources:\n  gpu: []\n",
            PluginConfig(),
            "config.yaml: resources.gpu: unknown key, ignored as NVIDIA's plugin does (did you "
            "mean 'gpus'?)",
        ),
        (
            "flags:\n  migstrategy: mixed\n",
            PluginConfig(flags=Flags(mig_strategy="mixed")),
            "config.yaml: flags.migstrategy: read as 'migStrategy' (NVIDIA matches keys ignoring "
            "case)",
        ),
        (
            "flags:\n  plugin:\n    deviceIdStrategy: index\n",
            PluginConfig(flags=Flags(plugin=PluginFlags(device_id_strategy="index"))),
            "config.yaml: flags.plugin.deviceIdStrategy: read as 'deviceIDStrategy'",
        ),
        (
            TS.replace("timeSlicing", "timeslicing"),
            PluginConfig(sharing=GPU_X2),
            "config.yaml: sharing.timeslicing: read as 'timeSlicing'",
        ),
        (
            "flags:\n  migStrategy: single\n  MIGSTRATEGY: mixed\n",
            PluginConfig(flags=Flags(mig_strategy="mixed")),
            "config.yaml: flags.MIGSTRATEGY: read as 'migStrategy'",
        ),
        (TS.replace("replicas: 2", "replicas: 2.0"), PluginConfig(sharing=GPU_X2), None),
        (TS + "      devices: 2.0\n", PluginConfig(sharing=GPU_X2), "config.yaml: sharing"),
        (
            TS + "      devices: [0.0, '1:0']\n",
            PluginConfig(sharing=GPU_X2),
            "config.yaml: sharing",
        ),
        ("sharing:\n  mps:\n", PluginConfig(), None),
        (  # replicas.go reads renameByDefault from a map: RenameByDefault is no key of it
            TS.replace("    resources", "    RenameByDefault: true\n    resources"),
            PluginConfig(sharing=GPU_X2),
            "config.yaml: sharing.timeSlicing.RenameByDefault: ignored: NVIDIA's plugin reads "
            "this key only as 'renameByDefault'",
        ),
        (  # sharing.go: MPS wins where both are set
            TS + "  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 3}\n",
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.MPS,
                    fail_requests_greater_than_one=True,
                    resources=(ReplicatedResource(name="nvidia.com/gpu", replicas=3),),
                )
            ),
            "config.yaml: sharing.timeSlicing: ignored: mps is set, and wins",
        ),
    ],
    ids=[
        "sharedDevicesAllocationPolicy is a v0.20 key",
        "a key from another version warns and runs",
        "misspelt top-level key: did you mean",
        "no close match lists the valid keys",
        "replica beside replicas",
        "resources.gpu",
        "keys match ignoring case, as Go's JSON does",
        "deviceIdStrategy is deviceIDStrategy",
        "timeslicing is timeSlicing",
        "the last of two spellings wins",
        "replicas: 4.0 is an integer",
        "devices: 2.0 is a count",
        "whole floats in a devices list are indexes",
        "an empty mps section is no sharing (a nil pointer)",
        "sharing keys match exactly (replicas.go's maps)",
        "timeSlicing and mps: mps",
    ],
)
def test_nvidia_accepts_and_so_do_we(text, expected, warning):
    config, warnings = parse_config(text, source="config.yaml")
    assert config == expected
    if warning is None:
        assert warnings == ()
    else:
        assert [w for w in warnings if w.startswith(warning)], warnings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "sharing:\n  timeSlicing:\n",
            "config.yaml: sharing.timeSlicing.resources: no resources specified",
        ),
        (
            "flags:\n  plugin:\n    deviceListStrategy: envvar,volume-mounts\n",
            "config.yaml: flags.plugin.deviceListStrategy: invalid strategy 'envvar,volume-mounts'",
        ),
        (
            "flags:\n  plugin:\n    deviceListStrategy: 5\n",
            "config.yaml: flags.plugin.deviceListStrategy: expected a string or a list of "
            "strings, got 5",
        ),
        (
            "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: spread\n",
            "config.yaml: flags.plugin.sharedDevicesAllocationPolicy: invalid value 'spread' "
            "(valid: distributed, packed)",
        ),
        (
            TS.replace("replicas: 2", "replicas: 2.5"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: expected an integer",
        ),
        ("version: 2023-13-01\n", "config.yaml: version: unknown version '2023-13-01'"),
        ("version: 2023-01-01\n", "config.yaml: version: unknown version '2023-01-01'"),
        ("version: !!timestamp x\n", "config.yaml: version: unknown version 'x'"),
        ("version: !!int x\n", "config.yaml: not valid YAML or JSON: invalid literal"),
        ("flags:\n  migStrategy: {a: b}\n", "config.yaml: flags.migStrategy: expected a string"),
        (  # replicas.go: "no resources specified"
            TS.replace("    resources", "    Resources"),
            "config.yaml: sharing.timeSlicing.resources: no resources specified",
        ),
        (  # replicas.go: "no replicas specified"
            TS.replace("replicas: 2", "Replicas: 2"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: required",
        ),
    ],
    ids=[
        "an empty timeSlicing section",
        "comma-separated strategies are one invalid string in the file",
        "deviceListStrategy: 5 is an error, not a TypeError",
        "bad allocation policy",
        "fractional replicas",
        "an invalid date is a string, named with its key",
        "a valid date is a string too, as in Go",
        "an explicit timestamp tag is not an AttributeError",
        "a bad explicit int tag",
        "mapping where a string goes",
        "Resources is no resources key",
        "Replicas is no replicas key",
    ],
)
def test_nvidia_rejects_and_so_do_we(text, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(text, source="config.yaml")
    assert str(exc.value).startswith(message), str(exc.value)


ALIAS_BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
    "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
)


@pytest.mark.parametrize(
    "where",
    [
        "flags:\n  plugin:\n    deviceListStrategy: [*h]\n",
        "imex:\n  channelIDs: *h\n",
        TS + "      devices: [*h]\n",
        "flags:\n  migStrategy: *h\n",
        "version: *h\n",
    ],
    ids=["deviceListStrategy", "channelIDs", "devices", "migStrategy", "version"],
)
def test_alias_bomb_gives_a_short_message(where):
    """10^8 elements by reference in a few hundred bytes: the message stays one short line."""
    with pytest.raises(ConfigError) as exc:
        parse_config(ALIAS_BOMB + where, source="config.yaml")
    assert len(str(exc.value)) < 400, str(exc.value)[:400]
    assert str(exc.value).startswith("config.yaml: ")


# Fuzzing: whatever the text, the loader returns a config or raises ConfigError naming the
# file, in one line of bounded length.
_KEYS = [
    "version",
    "flags",
    "plugin",
    "migStrategy",
    "deviceListStrategy",
    "sharing",
    "timeSlicing",
    "mps",
    "resources",
    "name",
    "replicas",
    "devices",
    "renameByDefault",
    "imex",
    "channelIDs",
    "gfd",
    "sharedDevicesAllocationPolicy",
]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["all", "gpu", "envvar", "v1", "mixed", "2023-13-01", "GPU-x", "0:0"]),
    st.text(max_size=8),
)
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _check(text: str) -> None:
    try:
        parse_config(text, source="fuzz.yaml")
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml: ")
        assert len(message) < 2_000


@settings(max_examples=300, deadline=None)
@given(_DOCS)
def test_fuzz_structured_documents(doc):
    import json

    _check(json.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "version: ",
                "flags:",
                "\n  ",
                "\n    ",
                "\n- ",
                "plugin:",
                "sharing:",
                "timeSlicing:",
                "resources:",
                "replicas: ",
                "devices: ",
                "name: gpu",
                "&a ",
                "*a",
                "!!timestamp ",
                "!!int ",
                "!!float ",
                "!!binary ",
                "!!set ",
                "!!python/name:os.system ",
                "[",
                "]",
                "{",
                "}",
                ",",
                "? ",
                "4.0",
                "2023-13-01",
                "x",
                "'",
                '"',
                "\t",
                "<<: ",
            ]
        ),
        max_size=30,
    ).map("".join)
)
def test_fuzz_yaml_fragments(text):
    _check(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_any_text(text):
    _check(text)


# api/config/v1/replicas_test.go (v0.20), TestUnmarshalReplicatedDevices and
# TestUnmarshalReplicatedResource: the `devices` and resource entries NVIDIA accepts or
# rejects, read here through a time-slicing config.
def _entry(fields: str) -> str:
    return "sharing:\n  timeSlicing:\n    resources:\n    - " + fields + "\n"


U = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"


@pytest.mark.parametrize(
    ("devices", "ok"),
    [
        ('"not-all"', False),
        ("-2", False),
        ("[-1]", False),
        ('["-1"]', False),
        ('["invalid-UUID"]', False),
        ('["GPU-UUID"]', False),
        ('["MIG-UUID"]', False),
        (f'["MIG-GPU-{U}"]', False),
        ('"all"', True),
        ("2", True),
        ("[0]", True),
        ('["0"]', True),
        ('["0:0"]', True),
        (f'["GPU-{U}"]', True),
        (f'["MIG-{U}"]', True),
        (f'["MIG-GPU-{U}/0/0"]', True),
        (f'[0, "0:0", "GPU-{U}"]', True),
    ],
)
def test_nvidia_replicated_devices(devices, ok):
    text = _entry(f"{{name: gpu, replicas: 2, devices: {devices}}}")
    if ok:
        assert parse_config(text, source="c")[0].sharing.resources[0].replicas == 2
    else:
        with pytest.raises(ConfigError, match=r"^c: sharing\.timeSlicing\.resources\[0\]\.devices"):
            parse_config(text, source="c")


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ("{}", False),
        ("{name: valid}", False),
        ("{name: valid, devices: all}", False),
        ("{name: valid, devices: all, rename: valid-shared}", False),
        ("{name: valid, devices: all, replicas: 2}", True),
        ("{name: valid, devices: all, replicas: 2, rename: valid-shared}", True),
        ("{name: valid, replicas: -1}", False),
        ("{name: valid, replicas: 0}", False),
        ("{name: valid, replicas: 2}", True),
        ("{name: valid, replicas: 2, rename: valid-shared}", True),
        ("{name: $invalid$, replicas: 2, rename: valid-shared}", False),
        ("{name: valid, replicas: 2, rename: $invalid$}", False),
    ],
)
def test_nvidia_replicated_resource(fields, ok):
    text = _entry(fields)
    if ok:
        assert parse_config(text, source="c")[0].sharing.resources[0].name == "nvidia.com/valid"
    else:
        with pytest.raises(ConfigError, match=r"^c: sharing\.timeSlicing\.resources\[0\]"):
            parse_config(text, source="c")
