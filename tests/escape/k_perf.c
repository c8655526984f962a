/* perf_event_open: a software counter on ourselves, a hardware one on
 * every CPU, and a tracepoint (kernel info leaks, CVE-2013-2094). */
#include <linux/perf_event.h>
#include "escape.h"

int main(void)
{
	struct perf_event_attr a = { .type = PERF_TYPE_SOFTWARE, .size = sizeof(a),
				     .config = PERF_COUNT_SW_CPU_CLOCK, .disabled = 1 };

	must_fail_with("perf_event_open(self, sw)", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0), EPERM);
	a.type = PERF_TYPE_HARDWARE;
	a.config = PERF_COUNT_HW_CPU_CYCLES;
	must_fail_with("perf_event_open(all, hw)", syscall(SYS_perf_event_open, &a, -1, 0, -1, 0), EPERM);
	a.type = PERF_TYPE_TRACEPOINT;
	a.config = 1;
	must_fail_with("perf_event_open(tracepoint)", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0), EPERM);
	BLOCKED("perf_event_open is denied");
}
