"""The engine's environment: parsed from /proc/PID/environ and Environment=, values kept
in a bundle only for the variables the checks read."""

from strata_doctor.facts.environ import engine_variable, parse_environ, parse_unit_environment


def test_environ_keeps_engine_variables_only() -> None:
    data = (b"PATH=/usr/bin\0CUDA_VISIBLE_DEVICES=5\0CUDA_DEVICE_ORDER=PCI_BUS_ID\0"
            b"HF_TOKEN=hf_secret\0OMP_NUM_THREADS=44\0BROKEN\0container=docker\0")
    assert parse_environ(data) == {"CUDA_VISIBLE_DEVICES": "5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                   "OMP_NUM_THREADS": "44", "container": "docker"}


def test_environ_empty_and_odd_bytes() -> None:
    assert parse_environ(b"") == {}
    assert parse_environ(b"\xff\xfe=1\0HIP_VISIBLE_DEVICES=\xff") == {"HIP_VISIBLE_DEVICES": "\ufffd"}


def test_unit_environment_quoting() -> None:
    value = 'CUDA_VISIBLE_DEVICES=5 "OMP_PLACES={0:22}, {44:22}" SECRET=x ROCR_VISIBLE_DEVICES=GPU-1'
    assert parse_unit_environment(value) == {"CUDA_VISIBLE_DEVICES": "5", "OMP_PLACES": "{0:22}, {44:22}",
                                             "ROCR_VISIBLE_DEVICES": "GPU-1"}
    assert parse_unit_environment('CUDA_VISIBLE_DEVICES=1 "OMP_PLACES=cores') == {"CUDA_VISIBLE_DEVICES": "1"}


def test_engine_variable_names() -> None:
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GOMP_CPU_AFFINITY",
                 "MKL_NUM_THREADS", "NCCL_P2P_DISABLE", "STRATA_ARENA"):
        assert engine_variable(name), name
    for name in ("HF_TOKEN", "PATH", "AWS_SECRET_ACCESS_KEY", "cuda_visible_devices", "XCUDA_X"):
        assert not engine_variable(name), name


def test_a_bundle_keeps_only_the_engine_variables_values() -> None:
    from strata_doctor.output.bundle import Entry
    from strata_doctor.output.bundle_write import _scrub_environ

    data = b"HF_TOKEN=hf_secret\0CUDA_VISIBLE_DEVICES=5\0PATH=/usr/bin\0OMP_PROC_BIND=close\0BARE\0"
    kept = _scrub_environ(Entry("/proc/4242/environ", "file", data)).data
    assert kept == b"HF_TOKEN=\0CUDA_VISIBLE_DEVICES=5\0PATH=\0OMP_PROC_BIND=close\0BARE\0"
