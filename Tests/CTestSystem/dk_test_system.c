#define _GNU_SOURCE
#include "dk_test_system.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

int dk_test_enter_network_namespace(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int status = setns(fd, CLONE_NEWNET);
    int saved = errno;
    close(fd);
    errno = saved;
    return status;
}
