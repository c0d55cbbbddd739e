#define _GNU_SOURCE
#include "dk_file.h"

#include <fcntl.h>
#include <linux/falloc.h>

int dk_fallocate_keep_size(int fd, off_t offset, off_t length) {
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length);
}

ssize_t dk_splice(int fd_in, off_t *offset_in, int fd_out, off_t *offset_out, size_t length, unsigned int flags) {
    return splice(fd_in, offset_in, fd_out, offset_out, length, flags);
}
