// closecheck: an LD_PRELOAD shim that reports every close(2) of a descriptor that is not open (EBADF).
// Such a close is the visible half of a double close; the other half, a close that lands after the number
// was reused, silently closes someone else's socket or file (a test's send then failed with EBADF, once
// in many suite runs). Scripts/test.sh runs the whole suite with it preloaded and fails on any report.
//
// Build: cc -shared -fPIC -O1 -o closecheck.so closecheck.c -ldl   (Scripts/test.sh builds it in .build)
//
// Environment:
//   CLOSECHECK_LOG      file the reports are appended to (a header line, then a backtrace).
//   CLOSECHECK_PROCESS  only processes whose program name (program_invocation_short_name) equals this
//                       report, so servers started by the tests (nginx, PostgreSQL…) may close what they
//                       like; unset: every process reports.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int (*real_close)(int);

static int reports(void) {
    const char *only = getenv("CLOSECHECK_PROCESS");
    return only == NULL || strcmp(only, program_invocation_short_name) == 0;
}

int close(int fd) {
    if (real_close == NULL) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    int result = real_close(fd);
    if (result == -1 && errno == EBADF && fd >= 0 && reports()) {
        int saved = errno;
        const char *path = getenv("CLOSECHECK_LOG");
        int log = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : 2;
        if (log >= 0) {
            char line[160];
            int length = snprintf(line, sizeof line, "closecheck: close(%d) of a descriptor that is not open, pid %d (%s)\n",
                fd, (int)getpid(), program_invocation_short_name);
            if (length > 0) (void)!write(log, line, (size_t)length);
            void *frames[48];
            backtrace_symbols_fd(frames, backtrace(frames, 48), log);
            if (log != 2) real_close(log);
        }
        errno = saved;
    }
    return result;
}
