/* ls_test_control (include/lockstep.h): the one entry for the process-wide settings, debug
 * switches and fault injection. Each switch lives with the code it steers (the ISA choice in
 * kernels/cpu/isa.c, CUDA graphs in kernels/device.c, the probe's trace, memo folder and
 * fault in decode/probe.c, allocation faults in core/fault.c); this file only dispatches.
 * The library never reads the environment: the CLI maps the documented variables onto these
 * (docs/settings.md). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/fault.h"
#include "decode/probe.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "lockstep.h"

static int describe(char *buf, size_t cap) {
    if (!buf || !cap) return LS_ERR_ARG;
    char memo[1024], fault_probe[64], fault_alloc[128];
    ls_probe_memo_dir(memo, sizeof memo);
    ls_probe_fault_describe(fault_probe, sizeof fault_probe);
    ls_fault_describe(fault_alloc, sizeof fault_alloc);
    snprintf(buf, cap, "isa=%s cuda_graphs=%d probe_trace=%d probe_memo=%s fault_probe=%s fault_alloc=%s",
             ls_cpu_isa() == LS_ISA_AVX512 ? "avx512"
             : ls_cpu_isa() == LS_ISA_AVX2 ? "avx2"
                                           : "scalar",
             ls_backend_graphs() ? 1 : 0, ls_probe_trace() ? 1 : 0, memo[0] ? memo : "off", fault_probe, fault_alloc);
    return LS_OK;
}

int ls_test_control(int op, ...) {
    va_list ap;
    va_start(ap, op);
    int rc = LS_OK;
    switch (op) {
    case LS_TESTCTL_CUDA_GRAPHS: ls_backend_set_graphs(va_arg(ap, int) != 0); break;
    case LS_TESTCTL_CUDA_OFF: ls_backend_set_cuda_off(va_arg(ap, unsigned)); break;
    case LS_TESTCTL_ISA: rc = ls_cpu_isa_set(va_arg(ap, const char *)); break;
    case LS_TESTCTL_PROBE_TRACE: ls_probe_set_trace(va_arg(ap, int) != 0); break;
    case LS_TESTCTL_PROBE_MEMO_DIR: rc = ls_probe_set_memo_dir(va_arg(ap, const char *)); break;
    case LS_TESTCTL_FAULT_PROBE: {
        int layer = va_arg(ap, int);
        rc = ls_probe_set_fault(layer, va_arg(ap, const char *));
        break;
    }
    case LS_TESTCTL_FAULT_ALLOC: {
        const char *site = va_arg(ap, const char *);
        rc = ls_fault_arm(site, va_arg(ap, int));
        break;
    }
    case LS_TESTCTL_STEP_TIMES: {
        const int on = va_arg(ap, int);
        ls_step_times *out = va_arg(ap, ls_step_times *);
        int64_t n, host_ns, device_ns;
        ls_backend_step_times_take(&n, &host_ns, &device_ns);
        if (out)
            *out = (ls_step_times){.steps = n, .host_ms = (double)host_ns / 1e6, .device_ms = (double)device_ns / 1e6};
        ls_backend_set_step_timing(on != 0);
        break;
    }
    case LS_TESTCTL_DESCRIBE: {
        char *buf = va_arg(ap, char *);
        rc = describe(buf, va_arg(ap, size_t));
        break;
    }
    default: rc = LS_ERR_ARG; break;
    }
    va_end(ap);
    return rc;
}
