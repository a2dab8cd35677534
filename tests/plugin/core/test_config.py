"""NVIDIA's config file format: what parses unchanged, what fails and how the error reads."""

import json

import pytest

from gpufleet.plugin.core.config import (
    ConfigError,
    Flags,
    Imex,
    PluginConfig,
    PluginFlags,
    ReplicatedResource,
    Sharing,
    SharingKind,
    merge,
)
from gpufleet.plugin.core.config_parse import parse_config

# The two examples from NVIDIA's README, byte for byte.
README_FLAGS = """\
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""
README_TIME_SLICING = """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true          # advertises nvidia.com/gpu.shared
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
GPU_X10 = (ReplicatedResource(name="nvidia.com/gpu", replicas=10),)


def parse(text: str) -> PluginConfig:
    config, _ = parse_config(text, source="config.yaml")
    return config


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (README_FLAGS, PluginConfig()),
        (
            README_TIME_SLICING,
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.TIME_SLICING, rename_by_default=True, resources=GPU_X10
                )
            ),
        ),
        (
            json.dumps({"version": "v1", "flags": {"migStrategy": "mixed"}}),
            PluginConfig(flags=Flags(mig_strategy="mixed")),
        ),
        (
            '{\n\t"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 10}]}}}',
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.MPS, fail_requests_greater_than_one=True, resources=GPU_X10
                )
            ),
        ),
        ("", PluginConfig()),
        ("flags:\n", PluginConfig()),
        ("flags:\n  migStrategy: single\n", PluginConfig(flags=Flags(mig_strategy="single"))),
        (
            "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 4\n",
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.TIME_SLICING,
                    resources=(ReplicatedResource(name="nvidia.com/gpu", replicas=4),),
                )
            ),
        ),
        (
            "sharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n"
            "    - {name: nvidia.com/gpu, replicas: 2}\n",
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.MPS,
                    resources=(ReplicatedResource(name="nvidia.com/gpu", replicas=2),),
                )
            ),
        ),
        (
            "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"
            "    - {name: nvidia.com/mig-1g.10gb, replicas: 3}\n    - {name: nvidia.com/gpu, "
            "replicas: 2}\n",
            PluginConfig(
                sharing=Sharing(
                    kind=SharingKind.TIME_SLICING,
                    fail_requests_greater_than_one=True,
                    resources=(
                        ReplicatedResource(name="nvidia.com/mig-1g.10gb", replicas=3),
                        ReplicatedResource(name="nvidia.com/gpu", replicas=2),
                    ),
                )
            ),
        ),
        (
            "flags:\n  plugin:\n    deviceListStrategy: [volume-mounts, cdi-cri]\n",
            PluginConfig(
                flags=Flags(plugin=PluginFlags(device_list_strategy=("volume-mounts", "cdi-cri")))
            ),
        ),
        (
            "flags:\n  nvidiaDevRoot: /dev-root\n  mpsRoot: /run/nvidia/mps\n"
            "  gdrcopyEnabled: true\n  gdsEnabled: true\n  mofedEnabled: true\n"
            "  deviceDiscoveryStrategy: nvml\n",
            PluginConfig(
                flags=Flags(
                    nvidia_dev_root="/dev-root",
                    mps_root="/run/nvidia/mps",
                    gdrcopy_enabled=True,
                    gds_enabled=True,
                    mofed_enabled=True,
                    device_discovery_strategy="nvml",
                )
            ),
        ),
        (
            "flags:\n  plugin:\n    kubeletSocket: ''\n    cdiAnnotationPrefix: x.io/\n"
            "    nvidiaCTKPath: /ctk\n    containerDriverRoot: /drv\n    passDeviceSpecs: true\n"
            "    deviceIDStrategy: index\n",
            PluginConfig(
                flags=Flags(
                    plugin=PluginFlags(
                        kubelet_socket="",
                        cdi_annotation_prefix="x.io/",
                        nvidia_ctk_path="/ctk",
                        container_driver_root="/drv",
                        pass_device_specs=True,
                        device_id_strategy="index",
                    )
                )
            ),
        ),
        ("flags:\n  gfd:\n    oneshot: true\n    sleepInterval: 60s\n", PluginConfig()),
        (
            "imex:\n  channelIDs: [0]\n  required: true\n",
            PluginConfig(imex=Imex(channel_ids=(0,), required=True)),
        ),
        ("version:\nflags:\n  migStrategy:\n", PluginConfig()),
        ('{"flags": {"migStrategy": "single",}}', PluginConfig(flags=Flags(mig_strategy="single"))),
    ],
    ids=[
        "README flags example",
        "README time-slicing example",
        "JSON",
        "JSON with tab indentation (PyYAML would reject it)",
        "empty file is the default config",
        "empty section",
        "mig single",
        "bare resource name gets the nvidia.com/ prefix",
        "mps failRequestsGreaterThanOne false is honoured (v0.20.0)",
        "mixed MIG resource and two entries",
        "device list strategy as a list",
        "every flags key",
        "every flags.plugin key",
        "gfd section belongs to GFD and is accepted",
        "imex",
        "null values mean unset, as NVIDIA's pointers do",
        "JSON with a trailing comma falls back to YAML",
    ],
)
def test_valid_configs_parse(text, expected):
    assert parse(text) == expected


def test_readme_examples_have_no_warnings():
    assert parse_config(README_FLAGS, source="c")[1] == ()
    assert parse_config(README_TIME_SLICING, source="c")[1] == ()


def test_advertised_name_and_dev_root():
    sharing = parse(README_TIME_SLICING).sharing
    assert sharing.advertised_name("nvidia.com/gpu") == "nvidia.com/gpu.shared"
    assert Sharing().advertised_name("nvidia.com/gpu") == "nvidia.com/gpu"
    assert Flags().dev_root == "/"
    assert Flags(nvidia_driver_root="/run/nvidia/driver").dev_root == "/run/nvidia/driver"
    assert Flags(nvidia_driver_root="/d", nvidia_dev_root="/x").dev_root == "/x"


TS = "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\n", "config.yaml: version: unknown version 'v2' (only 'v1' is supported)"),
        ("version: 1\n", "config.yaml: version: unknown version 1"),
        ("- a\n", "config.yaml: expected a mapping, got a list"),
        ("flags: [1]\n", "config.yaml: flags: expected a mapping, got a list"),
        (
            "flags:\n  migStrategy: all\n",
            "config.yaml: flags.migStrategy: invalid value 'all' (valid: none, single, mixed)",
        ),
        (
            "flags:\n  failOnInitError: 'true'\n",
            "config.yaml: flags.failOnInitError: expected a boolean (true or false), got a str",
        ),
        (
            "flags:\n  nvidiaDriverRoot: 5\n",
            "config.yaml: flags.nvidiaDriverRoot: expected a string, got an integer 5",
        ),
        (
            "flags:\n  plugin:\n    deviceListStrategy: [envvar, nvml]\n",
            "config.yaml: flags.plugin.deviceListStrategy: invalid strategy 'nvml'",
        ),
        (
            "flags:\n  plugin:\n    deviceListStrategy: []\n",
            "config.yaml: flags.plugin.deviceListStrategy: no device list strategy given",
        ),
        (
            "flags:\n  plugin:\n    deviceIDStrategy: serial\n",
            "config.yaml: flags.plugin.deviceIDStrategy: invalid value 'serial'",
        ),
        (
            "flags:\n  deviceDiscoveryStrategy: pci\n",
            "config.yaml: flags.deviceDiscoveryStrategy: invalid value 'pci'",
        ),
        (
            TS.replace("replicas: 2", "replicas: 1"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: number of replicas must be "
            ">= 2, got 1",
        ),
        (
            TS.replace("replicas: 2", "replicas: 99999999999999999999"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: number of replicas must be "
            "<= 1024, got 99999999999999999999",
        ),
        (
            TS.replace("replicas: 2", "replicas: '4'"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: expected an integer, got a "
            "str",
        ),
        (
            TS.replace("replicas: 2", "replicas: 2.5"),
            "config.yaml: sharing.timeSlicing.resources[0].replicas: expected an integer, got a "
            "float",
        ),
        (
            "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n",
            "config.yaml: sharing.timeSlicing.resources[0].replicas: required",
        ),
        (
            "sharing:\n  timeSlicing:\n    resources:\n    - replicas: 2\n",
            "config.yaml: sharing.timeSlicing.resources[0].name: required",
        ),
        (
            "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
            "config.yaml: sharing.timeSlicing.resources: no resources specified",
        ),
        (
            "sharing:\n  mps:\n    resources: []\n",
            "config.yaml: sharing.mps.resources: no resources specified",
        ),
        (
            "sharing:\n  mps:\n    resources: {name: gpu}\n",
            "config.yaml: sharing.mps.resources: expected a list, got a mapping",
        ),
        (
            TS.replace("nvidia.com/gpu", "nvidia.com/GPU"),
            "config.yaml: sharing.timeSlicing.resources[0].name: 'nvidia.com/GPU': the name after",
        ),
        (
            TS.replace("nvidia.com/gpu", "example.com/gpu"),
            "config.yaml: sharing.timeSlicing.resources[0].name: 'nvidia.com/example.com/gpu'",
        ),
        (
            TS.replace("nvidia.com/gpu", "g" * 60),
            "config.yaml: sharing.timeSlicing.resources[0].name: 'nvidia.com/ggg",
        ),
        (
            TS + "    - name: gpu\n      replicas: 3\n",
            "config.yaml: sharing.timeSlicing.resources[1].name: 'nvidia.com/gpu' is already in "
            "resources[0]",
        ),
        (
            TS.replace("    resources", "    renameByDefault: 1\n    resources"),
            "config.yaml: sharing.timeSlicing.renameByDefault: expected a boolean",
        ),
        (  # read even beside mps, as NVIDIA's reads it
            TS.replace("replicas: 2", "replicas: 1")
            + "  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n",
            "config.yaml: sharing.timeSlicing.resources[0].replicas: number of replicas",
        ),
        (
            TS + "      devices: some\n",
            "config.yaml: sharing.timeSlicing.resources[0].devices: expected 'all', a count",
        ),
        (
            TS + "      devices: 0\n",
            "config.yaml: sharing.timeSlicing.resources[0].devices: a count of devices must be > 0",
        ),
        (
            TS + "      devices: [0, GPU-nope]\n",
            "config.yaml: sharing.timeSlicing.resources[0].devices[1]: expected a GPU index",
        ),
        (
            TS + "      rename: Bad_Name\n",
            "config.yaml: sharing.timeSlicing.resources[0].rename: 'nvidia.com/Bad_Name'",
        ),
        (
            "resources:\n  gpus:\n  - name: a100\n",
            "config.yaml: resources.gpus[0].pattern: required",
        ),
        (
            "imex:\n  channelIDs: [1]\n",
            "config.yaml: imex.channelIDs: channelIDs must be [] or [0], got [1]",
        ),
        (
            "flags:\n  restartOnDeviceUnhealthy: sometimes\n",
            "config.yaml: flags.restartOnDeviceUnhealthy: expected a boolean",
        ),
        ("flags: {migStrategy: none\n", "config.yaml: line 2, column 1: not valid YAML or JSON"),
        (
            "version: v1\nflags:\n  migStrategy: \x00\n",
            "config.yaml: line 3, column 16: not valid YAML or JSON: control character '\\x00'",
        ),
    ],
    ids=[
        "version v2",
        "version not a string",
        "top level not a mapping",
        "section not a mapping",
        "bad MIG strategy",
        "bool as a string",
        "string as an int",
        "bad device list strategy",
        "empty device list strategy",
        "bad device ID strategy",
        "bad discovery strategy",
        "one replica (NVIDIA #1548)",
        "more replicas than a device list holds",
        "replicas as a string",
        "fractional replicas",
        "missing replicas",
        "missing name",
        "sharing with no resources",
        "empty resources",
        "resources not a list",
        "upper-case resource name",
        "foreign domain prefix",
        "resource name over 63 chars",
        "duplicate resource",
        "renameByDefault not a bool",
        "timeSlicing and mps together",
        "devices: a bad string",
        "devices: zero count",
        "devices: bad UUID",
        "bad rename",
        "resources entry without pattern",
        "imex channel other than 0",
        "ignored key still type-checked",
        "YAML syntax error has line and column",
        "a control character has its line too",  # two lines and an offset, before
    ],
)
def test_invalid_configs_name_file_and_key(text, message):
    with pytest.raises(ConfigError) as exc:
        parse(text)
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        (
            "resources:\n  gpus:\n  - pattern: '*A100*'\n    name: a100\n",
            "config.yaml: resources: custom resource names are disabled",
        ),
        (
            TS + "      rename: gpu-small\n",
            "config.yaml: sharing.timeSlicing.resources[0].rename: custom names are disabled",
        ),
        (
            TS + "      devices: [0, '1:0']\n",
            "config.yaml: sharing.timeSlicing.resources[0].devices: selecting devices is disabled",
        ),
        (
            TS + "      devices: 2\n",
            "config.yaml: sharing.timeSlicing.resources[0].devices: selecting devices is disabled",
        ),
        (
            "flags:\n  restartOnDeviceUnhealthy: true\n",
            "config.yaml: flags.restartOnDeviceUnhealthy: ignored",
        ),
        ("flags:\n  useNodeFeatureAPI: true\n", "config.yaml: flags.useNodeFeatureAPI: ignored"),
        (
            "flags:\n  plugin:\n    cdiFeatureFlags: [x]\n",
            "config.yaml: flags.plugin.cdiFeatureFlags: ignored",
        ),
    ],
    ids=[
        "resources section",
        "custom rename",
        "device list",
        "device count",
        "restartOnDeviceUnhealthy",
        "useNodeFeatureAPI",
        "cdiFeatureFlags",
    ],
)
def test_disabled_keys_parse_with_a_warning(text, warning):
    config, warnings = parse_config(text, source="config.yaml")
    assert [w for w in warnings if w.startswith(warning)], warnings
    assert config.sharing.resources in (
        (),
        (ReplicatedResource(name="nvidia.com/gpu", replicas=2),),
    )


@pytest.mark.parametrize(
    "text",
    [
        TS + "      devices: all\n",
        TS + "      rename: nvidia.com/gpu\n",
        TS.replace("    resources", "    renameByDefault: true\n    resources")
        + "      rename: gpu.shared\n",
        "resources:\n  gpus: []\n",
    ],
    ids=["devices all", "rename to itself", "rename to the default .shared", "empty resources"],
)
def test_default_valued_disabled_keys_do_not_warn(text):
    assert parse_config(text, source="c")[1] == ()


MPS = "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 4}\n"


@pytest.mark.parametrize(
    ("file_text", "overrides", "expected_flags"),
    [
        ("", {}, Flags()),
        ("flags: {migStrategy: single}", {}, Flags(mig_strategy="single")),
        ("flags: {migStrategy: single}", {"mig_strategy": "mixed"}, Flags(mig_strategy="mixed")),
        ("", {"mig_strategy": "mixed"}, Flags(mig_strategy="mixed")),
        ("flags: {failOnInitError: false}", {"fail_on_init_error": True}, Flags()),
        (
            "flags: {plugin: {deviceListStrategy: cdi-cri, passDeviceSpecs: true}}",
            {"device_list_strategy": ("volume-mounts",)},
            Flags(
                plugin=PluginFlags(device_list_strategy=("volume-mounts",), pass_device_specs=True)
            ),
        ),
        (
            "flags: {nvidiaDriverRoot: /run/nvidia/driver}",
            {"shared_devices_allocation_policy": "packed"},
            Flags(
                nvidia_driver_root="/run/nvidia/driver",
                plugin=PluginFlags(shared_devices_allocation_policy="packed"),
            ),
        ),
    ],
    ids=[
        "defaults",
        "file beats default",
        "override beats file",
        "override beats default",
        "override to the default value still beats the file",
        "plugin override keeps the file's other plugin keys",
        "flag-only key",
    ],
)
def test_merge_precedence(file_text, overrides, expected_flags):
    assert merge(parse(file_text), overrides).flags == expected_flags


def test_merge_overrides_imex_and_keeps_sharing():
    merged = merge(parse(TS), {"imex_channel_ids": (0,), "imex_required": True})
    assert merged.imex == Imex(channel_ids=(0,), required=True)
    assert merged.sharing == parse(TS).sharing


@pytest.mark.parametrize(
    ("file_text", "overrides", "message"),
    [
        (MPS, {}, "config.yaml: sharing.mps: using MPS requires --mps-root"),
        (
            MPS,
            {"mps_root": "/mps", "mig_strategy": "mixed"},
            "config.yaml: sharing.mps: using --mig-strategy=mixed is not supported with MPS",
        ),
        (
            MPS + "flags: {migStrategy: mixed, mpsRoot: /mps}",
            {},
            "config.yaml: sharing.mps: using --mig-strategy=mixed",
        ),
    ],
    ids=["mps needs mps-root", "mps with mixed from a flag", "mps with mixed from the file"],
)
def test_merge_checks_mps_rules(file_text, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        merge(parse(file_text), overrides, source="config.yaml")


def test_merge_accepts_mps_with_root():
    merged = merge(parse(MPS), {"mps_root": "/run/nvidia/mps"})
    assert merged.sharing.kind is SharingKind.MPS
    assert merged.flags.mps_root == "/run/nvidia/mps"


def test_merge_rejects_unknown_override_names():
    with pytest.raises(ValueError, match="not overridable"):
        merge(PluginConfig(), {"sim_fleet": "8xH100"})
