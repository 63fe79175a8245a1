"""Helpers shared by the bench scripts: what machine a table was measured on."""
import platform


def cpu_name():
    """The CPU model from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
