"""Where NVML comes from: the real `pynvml` module, or a fake driven by a trace.

Contract:
- `load_backend(fake=None)` returns an object with the pynvml functions listed
  in `USED_CALLS` plus `NVMLError` and the constants in `USED_CONSTANTS`: the
  real `pynvml` module (nvidia-ml-py, imported here and only here), or a
  `diagnose.nvml.fake.FakeNVML` when `fake` or the environment variable
  `SWIFTDOC_FAKE_NVML` names a trace file (tests, benches, demos).
- `open_backend(fake=None)` also calls `nvmlInit()`; it raises
  `NvmlUnavailable` (an `EnvironmentMissing`, exit 3) with a one-line reason and
  an install/driver hint when there is no library, no driver or no GPU.
- `USED_CALLS` is the complete list of NVML calls swiftdoc makes; the fake
  implements exactly these and a test checks them against the real module.
"""
from __future__ import annotations

import os
from typing import Any

from diagnose.errors import EnvironmentMissing

FAKE_ENV = "SWIFTDOC_FAKE_NVML"

USED_CALLS: tuple[str, ...] = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",  # drivers older than 535 only
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",  # drivers without the v3 struct
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)

USED_CONSTANTS: tuple[str, ...] = (
    "NVML_PCIE_UTIL_TX_BYTES",
    "NVML_PCIE_UTIL_RX_BYTES",
    "NVML_CLOCK_SM",
    "NVML_CLOCK_MEM",
    "NVML_TEMPERATURE_GPU",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "nvmlEventTypeXidCriticalError",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_GPU_IS_LOST",
)

# NVML error codes (stable across releases; duplicated so callers need no pynvml)
ERR_UNINITIALIZED = 1
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_ARGUMENT_VERSION_MISMATCH = 25
ERR_GPU_NOT_FOUND = 28

_HINT = ("install the NVIDIA driver (it provides libnvidia-ml.so.1) and nvidia-ml-py; "
         "in a container, run it with the GPUs exposed (--gpus all)")


class NvmlUnavailable(EnvironmentMissing):
    """No usable NVML here: no library, no driver, or no GPU."""


def load_backend(fake: str | os.PathLike[str] | None = None) -> Any:
    fake = fake or os.environ.get(FAKE_ENV) or None
    if fake:
        from diagnose.nvml.fake import FakeNVML

        return FakeNVML.from_trace(fake)
    try:
        import pynvml  # nvidia-ml-py; the only place swiftdoc imports it
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed", hint="pip install nvidia-ml-py") from None
    if not hasattr(pynvml, "nvmlInitWithFlags"):
        # the old third-party `pynvml` package shadows nvidia-ml-py
        raise NvmlUnavailable("the installed `pynvml` module is not nvidia-ml-py",
                              hint="pip uninstall pynvml && pip install nvidia-ml-py")
    return pynvml


def error_code(exc: BaseException) -> int | None:
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


def open_backend(fake: str | os.PathLike[str] | None = None) -> Any:
    nvml = load_backend(fake)
    try:
        nvml.nvmlInit()
        n = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        code = error_code(e)
        what = {
            ERR_LIBRARY_NOT_FOUND: "NVML library not found (no NVIDIA driver on this machine)",
            ERR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
            ERR_NO_PERMISSION: "no permission to use NVML",
            ERR_GPU_NOT_FOUND: "no NVIDIA GPU found",
        }.get(code or -1, f"NVML failed to start: {e}")
        raise NvmlUnavailable(what, hint=_HINT) from None
    if not n:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        raise NvmlUnavailable("NVML sees no GPU", hint=_HINT)
    return nvml
