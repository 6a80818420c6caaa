"""The application: the ``hlo`` command, studies, tune and the debugging tools, with the
drivers that measure with XLA. Importing it lets ``hlo_analysis.devices.host()`` measure
this machine (analysis itself never compiles)."""

from hlo_analysis import devices as _devices


def _measure_host() -> _devices.Device:
    from hlo_lab.measured.host import measure_host  # lazy: XLA only when the host is measured

    return measure_host()


_devices.register_host_measurer(_measure_host)
